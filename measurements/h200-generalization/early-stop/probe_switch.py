import inspect, sys
import torch.utils.checkpoint as c
try:
    import sitecustomize
    print("sitecustomize:", getattr(sitecustomize, "__file__", None))
except Exception as e:
    print("no sitecustomize:", e)
print("_enable_checkpoint_early_stop =", c._enable_checkpoint_early_stop)
src = inspect.getsource(c)
for i, line in enumerate(src.splitlines()):
    if "early_stop" in line:
        print(i, line)
