"""Take device memory until the driver refuses, and say what was got.

1 GiB, then 64 MiB, then 2 MiB allocations through the CUDA driver API
(cuMemAlloc; no torch, no caching allocator), after creating the primary
context. Prints one `HEADROOM_RESULT` line: `alloc_peak` (bytes got),
`cuda_free_after_context` and `cuda_total` (cuMemGetInfo once the context
exists), `allocations`. `--hold-s` keeps the memory that long first (so that
the GPU's compute processes can be listed); `--pid-file` gets the process id.
The same job as FILL_JOB in calibration-collector/tests/it/gpu.rs.
"""
import argparse, ctypes, json, os, time

p = argparse.ArgumentParser()
p.add_argument("--hold-s", type=float, default=0.0)
p.add_argument("--pid-file")
p.add_argument("--tag")
a = p.parse_args()
cuda = ctypes.CDLL("libcuda.so.1")


def ok(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: CUresult {r}")


ok(cuda.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
ok(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
got, ptrs = 0, []
for chunk in (1 << 30, 64 << 20, 2 << 20):
    while True:
        ptr = ctypes.c_uint64()
        if cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(chunk)) != 0:
            break
        ptrs.append(ptr)
        got += chunk
if a.pid_file:
    with open(a.pid_file, "w") as f:
        f.write(str(os.getpid()))
time.sleep(a.hold_s)
print("HEADROOM_RESULT " + json.dumps({"alloc_peak": got, "cuda_free_after_context": free.value,
      "cuda_total": total.value, "allocations": len(ptrs)}), flush=True)
