// Exact detector products over decoded counts (u32 per pixel, frame after frame).
// WGSL has no 64-bit integers: every sum is a pair of u32 (low, high) and every addition
// propagates the carry of the low word, so the pair is the exact 64-bit sum (a frame's
// masked sum is below 2^60: at most 2^28 pixels of counts below 2^32). Products of a pixel
// index and a count (moments) are formed exactly from 16-bit halves.

struct Params {
  n_frames: u32,
  frame_pixels: u32,
  det_c: u32,
  n_masked: u32,
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> counts: array<u32>;
@group(0) @binding(2) var<storage, read> masked: array<u32>;
// masked sum: 2 u32 per frame; moments: 6 u32 per frame (total, sum_r, sum_c)
@group(0) @binding(3) var<storage, read_write> result: array<u32>;

const WG: u32 = 64u;
var<workgroup> partial: array<vec2<u32>, 192>;

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let low = a.x + b.x;
  return vec2<u32>(low, a.y + b.y + select(0u, 1u, low < a.x));
}

// a * b exactly, as (low, high)
fn mul64(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let p11 = a1 * b1;
  let middle = add64(vec2<u32>(p01 << 16u, p01 >> 16u), vec2<u32>(p10 << 16u, p10 >> 16u));
  return add64(add64(vec2<u32>(p00, 0u), middle), vec2<u32>(0u, p11));
}

// One workgroup per frame; the masked pixel list is shared by all frames.
@compute @workgroup_size(64)
fn masked_sum(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let frame = group.x + group.y * 65535u;
  if (frame >= params.n_frames) { return; }
  let base = frame * params.frame_pixels;
  var sum = vec2<u32>(0u, 0u);
  for (var k = lid; k < params.n_masked; k += WG) {
    sum = add64(sum, vec2<u32>(counts[base + masked[k]], 0u));
  }
  partial[lid] = sum;
  workgroupBarrier();
  for (var width = WG / 2u; width > 0u; width >>= 1u) {
    if (lid < width) { partial[lid] = add64(partial[lid], partial[lid + width]); }
    workgroupBarrier();
  }
  if (lid == 0u) {
    result[2u * frame] = partial[0].x;
    result[2u * frame + 1u] = partial[0].y;
  }
}

@compute @workgroup_size(64)
fn moments(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let frame = group.x + group.y * 65535u;
  if (frame >= params.n_frames) { return; }
  let base = frame * params.frame_pixels;
  var total = vec2<u32>(0u, 0u);
  var sum_r = vec2<u32>(0u, 0u);
  var sum_c = vec2<u32>(0u, 0u);
  for (var k = lid; k < params.n_masked; k += WG) {
    let p = masked[k];
    let v = counts[base + p];
    total = add64(total, vec2<u32>(v, 0u));
    sum_r = add64(sum_r, mul64(p / params.det_c, v));
    sum_c = add64(sum_c, mul64(p % params.det_c, v));
  }
  partial[lid] = total;
  partial[WG + lid] = sum_r;
  partial[2u * WG + lid] = sum_c;
  workgroupBarrier();
  for (var width = WG / 2u; width > 0u; width >>= 1u) {
    if (lid < width) {
      partial[lid] = add64(partial[lid], partial[lid + width]);
      partial[WG + lid] = add64(partial[WG + lid], partial[WG + lid + width]);
      partial[2u * WG + lid] = add64(partial[2u * WG + lid], partial[2u * WG + lid + width]);
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    for (var m = 0u; m < 3u; m++) {
      result[6u * frame + 2u * m] = partial[m * WG].x;
      result[6u * frame + 2u * m + 1u] = partial[m * WG].y;
    }
  }
}

// One invocation per detector pixel: the sum over frames (the mean pattern's numerator).
@compute @workgroup_size(64)
fn pattern_sum(@builtin(global_invocation_id) id: vec3<u32>) {
  let p = id.x + id.y * (65535u * 64u);
  if (p >= params.frame_pixels) { return; }
  var sum = vec2<u32>(0u, 0u);
  for (var t = 0u; t < params.n_frames; t++) {
    sum = add64(sum, vec2<u32>(counts[t * params.frame_pixels + p], 0u));
  }
  result[2u * p] = sum.x;
  result[2u * p + 1u] = sum.y;
}
