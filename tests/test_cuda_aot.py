"""The shipped fatbins match the kernel sources (host side; the GPU side is in
tests/hardware/test_cuda_aot.py)."""

from __future__ import annotations

from quantem.stem4d.cuda import aot, module_loader


def test_every_specialisation_has_a_current_fatbin():
    missing = aot.stale()
    assert missing == [], (
        "fatbins are stale or missing (a .cu file or its constants changed): run "
        f"`python -m quantem.stem4d.cuda.aot build` with nvcc; missing: {[p.name for p in missing]}"
    )


def test_no_orphan_fatbins_and_size_stays_small():
    wanted = {module_loader.fatbin_path(n, d).name for n, d in aot.specialisations()}
    shipped = {p.name for p in module_loader.FATBIN_DIR.glob("*.fatbin")}
    assert shipped == wanted
    total = sum(p.stat().st_size for p in module_loader.FATBIN_DIR.glob("*.fatbin"))
    assert total < 4 << 20


def test_key_names_the_rendered_source_and_options():
    a = module_loader.module_key("xxh3.cu", {})
    assert a == module_loader.module_key("xxh3.cu", {})
    assert module_loader.module_key("xxh3.cu", {"X": 1}) != a
    assert module_loader.module_key("rans_decode.cu", {}) != a
    assert module_loader.fatbin_path("xxh3.cu", {}).name.startswith("xxh3-" + a[:24])


def test_gencode_covers_the_listed_architectures_with_ptx():
    options = aot.gencode_options()
    for arch in module_loader.AOT_ARCHES:
        assert f"-gencode=arch=compute_{arch},code=sm_{arch}" in options
    newest = max(module_loader.AOT_ARCHES)
    assert f"-gencode=arch=compute_{newest},code=compute_{newest}" in options
