"""A host emulator for quantem's CUDA kernels (test helper, no GPU needed).

The ``.cu`` sources are compiled as C++20 with a shim that runs every thread of a thread
block as a real ``std::thread``; warp primitives (``__ballot_sync``, ``__shfl_*_sync``,
``__any_sync``, ``__all_sync``, ``__syncwarp``) exchange values through a per-warp buffer
between ``std::barrier`` phases, and ``__syncthreads`` is a block-wide barrier. Thread
blocks run one after another. This is faithful for warp-synchronous code in which all 32
lanes reach the same primitives in the same order (true of quantem's kernels), so the
kernels' indexing, bounds checks, lane/word ordering and barriers are exercised on every CI
run, with the CPU codecs as the reference.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

SHIM = r"""
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

struct Dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local Dim3 threadIdx;
static thread_local Dim3 blockIdx;
static Dim3 blockDim, gridDim;

struct WarpCtx {
    std::barrier<> bar{32};
    unsigned long long buf[32];
};
static thread_local WarpCtx* simt_warp = nullptr;
static thread_local int simt_lane = 0;
static std::barrier<>* simt_block_barrier = nullptr;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __align__(n)
#define __shared__
#define __constant__
#define __launch_bounds__(...)

alignas(16) static unsigned char smem[1 << 20];

struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

static inline void simt_sync() { simt_warp->bar.arrive_and_wait(); }
#define __syncwarp(...) simt_sync()
#define __syncthreads() simt_block_barrier->arrive_and_wait()

static inline unsigned __ballot_sync(unsigned, int pred) {
    simt_warp->buf[simt_lane] = pred ? 1 : 0;
    simt_sync();
    unsigned m = 0;
    for (int i = 0; i < 32; ++i) m |= (simt_warp->buf[i] ? 1u : 0u) << i;
    simt_sync();
    return m;
}
static inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
static inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, p) == 0xffffffffu; }

template <class T> static inline T simt_exchange(T v, int src, bool keep) {
    unsigned long long raw = 0;
    std::memcpy(&raw, &v, sizeof(T));
    simt_warp->buf[simt_lane] = raw;
    simt_sync();
    unsigned long long got = simt_warp->buf[keep ? simt_lane : (src & 31)];
    simt_sync();
    T r;
    std::memcpy(&r, &got, sizeof(T));
    return r;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return simt_exchange(v, src, false); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int m) { return simt_exchange(v, simt_lane ^ m, false); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned d) {
    int src = simt_lane - (int)d;
    return simt_exchange(v, src, src < 0);
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned d) {
    int src = simt_lane + (int)d;
    return simt_exchange(v, src, src > 31);
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {  // prmt, default mode
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned n = (s >> (4 * i)) & 15u;
        unsigned b = (unsigned)(v >> (8 * (n & 7u))) & 0xffu;
        if (n & 8u) b = (b & 0x80u) ? 0xffu : 0u;
        r |= b << (8 * i);
    }
    return r;
}
static inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline int atomicCAS(int* p, int c, int v) {
    __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return c;
}
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <class T> static inline T __ldg(const T* p) { return *p; }

template <class F> static void simt_launch(unsigned grid, unsigned block, F kernel) {
    gridDim.x = grid;
    blockDim.x = block;
    const unsigned warps = (block + 31) / 32;
    for (unsigned b = 0; b < grid; ++b) {
        std::vector<WarpCtx> ctx(warps);
        std::barrier<> block_barrier(block);
        simt_block_barrier = &block_barrier;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t) {
            threads.emplace_back([&, t, b] {
                threadIdx.x = t;
                blockIdx.x = b;
                simt_warp = &ctx[t / 32];
                simt_lane = t % 32;
                kernel();
            });
        }
        for (auto& th : threads) th.join();
    }
}
"""


def build(tmp_dir: Path, name: str, defines: dict, source: str, driver: str) -> ctypes.CDLL:
    """Compile ``source`` (a kernel file's text) with ``defines`` and ``driver`` into a library."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        import pytest

        pytest.skip("no C++ compiler to emulate the kernels on the host")
    from quantem.stem4d.cuda.module_loader import render_defines

    text = SHIM + render_defines(defines) + source + driver
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    unit = Path(tmp_dir) / f"{name}_{digest}.cpp"
    lib = unit.with_suffix(".so")
    if not lib.exists():
        unit.write_text(text)
        subprocess.run(
            [
                compiler,
                "-std=c++20",
                "-O1",
                "-w",
                "-shared",
                "-fPIC",
                "-pthread",
                "-o",
                str(lib),
                str(unit),
            ],
            check=True,
        )
    return ctypes.CDLL(str(lib))


def pointer(array) -> ctypes.c_void_p:
    return array.ctypes.data_as(ctypes.c_void_p)
