#!/usr/bin/env bash
# Builds the third-party payload for the GPU machine (issue 28 item 6): FlashAttention-4
# (flash_attn.cute, CuTe-DSL) and FlashInfer, as xz parts small enough for the device tool's
# carry (64 MiB per call, the checkout included). docs/python-backends.md, "Third-party kernels".
#
#   ci/thirdparty_carry.sh [--python 3.12] [--limit-mib 58] [--only fa4] [--site-only]
#
# 1. Downloads the pinned wheels below into .whl/ (once; this machine only has PyPI).
# 2. Unzips them into a staging site and drops what the kernels never load: the CUDA 12 flavour
#    of the CuTe-DSL libraries, static libraries, aarch64/QNX stubs, the iket profiler, every
#    FlashInfer JIT source but the prefill ones and packbits' (the #include closure of csrc/*prefill*, quantization*),
#    FlashInfer's CUDA sources of its other features, __pycache__, RECORD files.
# 3. Packs it as "units" (one tar.xz each in .carry-3p-build/, xz -9e with the x86 filter for binaries), FA4's first,
#    then fills parts of at most --limit-mib MiB with them in that order (first fit):
#    .carry-3p/part-N.tar.xz is a concatenation of unit archives (tar -x --ignore-zeros reads
#    them). Any order of unpacking works; ci/thirdparty_unpack.sh says what is complete.
# --python 3.11 builds the same payload for this machine's Python (.carry-3p-cp311/, its site
# in .carry-3p-cp311/site): tests/python/test_thirdparty_adapters.py imports it on the CPU.
# --site-only: the pruned site alone ($out/site), no archives (minutes of xz saved).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=3.12 limit_mib=58 only="" site_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) py=$2; shift 2 ;;
    --limit-mib) limit_mib=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --site-only) site_only=1; shift ;;
    *) echo "usage: $0 [--python 3.12] [--limit-mib 58] [--only fa4] [--site-only]" >&2; exit 2 ;;
  esac
done
tag=cp${py/./}
pip=${PIP:-$root/.deps/pyenv/bin/pip}
whl=$root/.whl/$tag
out=$root/.carry-3p; [ "$py" = 3.12 ] || out=$root/.carry-3p-$tag
build=$out-build  # the staging site and the unit archives: never carried, only the parts in $out are
stage=$build/stage
mkdir -p "$whl" "$out" "$build"

# group name==version. fa4: flash-attn-4 and what it imports; fi: FlashInfer's own additions
# (it also needs the fa4 group: nvidia-cutlass-dsl >= 4.8.0, apache-tvm-ffi, einops).
# Not carried, because the GPU machine's torch 2.11 brings them (its Requires-Dist): cuda-bindings,
# cuda-pathfinder, filelock, jinja2, typing-extensions, numpy, triton, the nvidia-* CUDA wheels.
# Not carried, because FlashInfer imports without them and its prefill never uses them (measured:
# `import flashinfer` and the prefill entry points import with them absent): cuda-python (a
# metapackage), cuda-core, cuda-tile, nccl4py, nccl-extensions, nvidia-cudnn-frontend, ninja (the
# machine's own ninja is on PATH). Not carried: nvidia-cutlass-dsl-libs-cu12 (the CUDA 12 build).
wheels="
fa4 flash-attn-4==4.0.0b36
fa4 nvidia-cutlass-dsl-libs-core==4.8.1
fa4 nvidia-cutlass-dsl-libs-base==4.8.1
fa4 nvidia-cutlass-dsl-libs-cu13==4.8.1
fa4 apache-tvm-ffi==0.1.15.post2
fa4 torch-c-dlpack-ext==0.1.5
fa4 quack-kernels==0.6.5
fa4 einops==0.8.2
fa4 protobuf==7.36.2
fi flashinfer-python==0.7.4
fi nvidia-ml-py==13.615.71
fi requests==2.34.2
fi charset-normalizer==3.5.3
fi idna==3.20
fi urllib3==2.8.0
fi certifi==2026.10.19.post1
fi tqdm==4.70.1
fi packaging==26.4
fi click==8.5.1
fi tabulate==0.10.0
"
plat=""
for p in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014; do
  plat="$plat --platform ${p}_x86_64"
done
echo "$wheels" | while read -r group spec; do
  [ -n "$spec" ] || continue
  [ -z "$only" ] || [ "$group" = "$only" ] || continue
  name=$(echo "${spec%%==*}" | tr '-' '_' | tr 'A-Z' 'a-z')
  ver=${spec##*==}
  ls "$whl" | grep -qi "^${name}-${ver}-" && continue
  "$pip" download -q --no-deps --only-binary=:all: --python-version "$py" $plat -d "$whl" "$spec"
done

rm -rf "$stage" && mkdir -p "$stage/fa4" "$stage/fi"
echo "$wheels" | while read -r group spec; do
  [ -n "$spec" ] || continue
  [ -z "$only" ] || [ "$group" = "$only" ] || continue
  name=$(echo "${spec%%==*}" | tr '-' '_' | tr 'A-Z' 'a-z')
  f=$(ls "$whl" | grep -i "^${name}-${spec##*==}-" | head -1)
  unzip -q -o "$whl/$f" -d "$stage/$group"
done

python3 - "$stage" "$out" "$limit_mib" "$site_only" "$build" <<'EOF'
import hashlib, os, pathlib, re, shutil, subprocess, sys
stage, out, limit_mib, site_only = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
build = pathlib.Path(sys.argv[5])
fa4, fi = stage / "fa4", stage / "fi"

def rm(p):
    if p.is_dir(): shutil.rmtree(p)
    elif p.exists(): p.unlink()

dropped = 0
def drop(p):
    global dropped
    for f in ([p] if p.is_file() else p.rglob("*")):
        if f.is_file(): dropped += f.stat().st_size
    rm(p)

for site in (fa4, fi):
    for p in list(site.rglob("__pycache__")) + list(site.rglob("*.pyc")) + list(site.glob("*.dist-info/RECORD")):
        drop(p)
cd = fa4 / "nvidia_cutlass_dsl"
if cd.exists():
    for p in [cd / "dsl_packages" / "iket", cd / "cu13" / "include", cd / "cu13" / "lib" / "stubs", *cd.rglob("*.a")]:
        drop(p)  # the profiler CLI, headers and static runtime for AOT export, other targets' stubs
    for p in ["flash_attn/cute/benchmark.py", "flash_attn/cute/benchmark_flash_attention_fp8.py", "build_backend.py"]:
        drop(fa4 / p)
    for p in (fa4 / "tvm_ffi").rglob("*.a"):
        drop(p)
fdir = fi / "flashinfer"
if fdir.exists():
    for p in ["b12x", "build_backend.py", "build_utils.py", "example.py"]:  # build helpers, nvidia-ml-py's example
        drop(fi / p)
    data = fdir / "data"
    src_ext = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".c", ".cc", ".inl", ".ptx"}
    for f in list(fdir.rglob("*")):  # CUDA sources of FlashInfer's other features (their JIT specs)
        if f.is_file() and data not in f.parents and f.suffix in src_ext:
            drop(f)
    # The JIT sources of prefill: csrc/*prefill* (not msa) and their #include closure in csrc/.
    csrc = data / "csrc"
    # quantization*: the custom mask is packed to bits by FlashInfer's packbits module before the
    # prefill runs (the H200 run without it: "ninja: error: csrc/quantization.cu ... missing").
    roots = [p.resolve() for p in csrc.iterdir()
             if p.is_file() and ("prefill" in p.name or p.name.startswith("quantization")) and not p.name.startswith("msa")]
    inc = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
    dirs, seen, todo = [csrc.resolve(), (data / "include").resolve()], set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen: continue
        seen.add(p)
        for name in inc.findall(p.read_text(errors="replace")):
            for d in [p.parent] + dirs:
                c = d / name
                if c.is_file():
                    todo.append(c.resolve()); break
    keep = {p for p in seen if csrc.resolve() in p.parents}
    keep |= {p.resolve() for p in csrc.iterdir() if p.is_file() and p.suffix in (".h", ".cuh", ".inc")}  # margin: csrc's own headers
    for f in list(csrc.rglob("*")):
        if f.is_file() and f.resolve() not in keep:
            drop(f)
    for p in [data / "build_backend.py", data / "build_utils.py", data / "cutlass" / "tools" / "util" / "scripts"]:
        drop(p)
    for d in sorted((p for p in data.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()): d.rmdir()
    print(f"thirdparty: FlashInfer prefill JIT sources kept: {len(keep)} files in csrc/")
print(f"thirdparty: dropped {dropped / 2**20:.0f} MiB of unpacked files")

# Units, in priority order: (name, site, paths relative to the site, binary?)
units = []
if cd.exists():
    mlir = sorted((cd / "dsl_packages/cutlass/_mlir/_mlir_libs").glob("_cutlass_ir.cu13.*"))
    rt = sorted((cd / "cu13/lib").glob("*.so"))
    units.append(("fa4-mlir", fa4, mlir, True))
    units.append(("fa4-runtime", fa4, rt, True))
    rest = [p for p in fa4.rglob("*") if p.is_file() and p not in mlir and p not in rt]
    units.append(("fa4-python", fa4, rest, False))
if fdir.exists():
    data = fdir / "data"
    units.append(("fi-python", fi, [p for p in fi.rglob("*") if p.is_file() and data not in p.parents], False))
    units.append(("fi-data", fi, [p for p in data.rglob("*") if p.is_file()], False))

udir = build / "units"
rm(udir); udir.mkdir(parents=True)
threads = str(max(1, min(4, os.cpu_count() or 1)))
built = []
for name, site, files, binary in units:
    marker = site / ".units" / name
    marker.parent.mkdir(exist_ok=True)
    raw = sum(f.stat().st_size for f in files)
    marker.write_text(f"{name} {len(files)} files {raw} bytes\n")
    if site_only:
        continue
    rel = sorted(str(f.relative_to(site)) for f in files) + [str(marker.relative_to(site))]
    lst = udir / f"{name}.list"
    lst.write_text("\n".join(rel) + "\n")
    dest = udir / f"{name}.tar.xz"
    filt = "--x86 --lzma2=preset=9e,dict=64MiB" if binary else "-9e"
    subprocess.run(f"tar -C '{site}' --owner=0 --group=0 --numeric-owner -cf - -T '{lst}' | xz {filt} -T{threads} -c > '{dest}'",
                   shell=True, check=True)
    size = dest.stat().st_size
    built.append((name, dest, size, raw, len(files)))
    print(f"thirdparty: unit {name}: {len(files)} files, {raw / 2**20:.1f} MiB unpacked, {size / 2**20:.1f} MiB xz", flush=True)

if site_only:
    sys.exit(0)
limit = limit_mib * 2**20
parts = []  # [[units], size]
for u in built:
    if u[2] > limit:
        sys.exit(f"thirdparty: unit {u[0]} is {u[2] / 2**20:.1f} MiB under xz, more than a part may be ({limit_mib} MiB)")
    for part in parts:
        if part[1] + u[2] <= limit:
            part[0].append(u); part[1] += u[2]; break
    else:
        parts.append([[u], u[2]])
for p in out.glob("part-*.tar.xz"):
    p.unlink()
lines = []
for i, (us, size) in enumerate(parts, 1):
    dest = out / f"part-{i}.tar.xz"
    with open(dest, "wb") as o:
        for u in us:
            o.write(u[1].read_bytes())
    sha = hashlib.sha256(dest.read_bytes()).hexdigest()[:16]
    lines.append(f"part-{i}.tar.xz {size} bytes ({size / 2**20:.1f} MiB) sha256:{sha} units: {' '.join(u[0] for u in us)}")
(out / "MANIFEST").write_text("\n".join(lines) + "\n")
print("\n".join("thirdparty: " + l for l in lines))
print(f"thirdparty: total {sum(p[1] for p in parts) / 2**20:.1f} MiB in {len(parts)} part(s), at most {limit_mib} MiB each")
EOF
if [ "$site_only" = 1 ]; then  # the two staging sites as one
  rm -rf "$out/site" && mkdir -p "$out/site"
  for g in fa4 fi; do [ -d "$stage/$g" ] && cp -al "$stage/$g/." "$out/site/"; done
  echo "thirdparty: site in $out/site ($(du -sh "$out/site" | cut -f1))"
elif [ "$py" != 3.12 ]; then  # a site for this machine's tests, from the parts as the GPU machine unpacks them
  rm -rf "$out/site" && mkdir -p "$out/site"
  for p in "$out"/part-*.tar.xz; do xz -dc "$p" | tar -x --ignore-zeros -C "$out/site"; done
fi
