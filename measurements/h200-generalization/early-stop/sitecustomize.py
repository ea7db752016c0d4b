"""Put on PYTHONPATH to run a job with non-reentrant checkpointing's early
stop turned off (torch.utils.checkpoint recomputes each checkpointed
segment whole, as the replay does): every Python process then imports
torch's checkpoint module first and clears its global switch."""
import torch.utils.checkpoint as _checkpoint

_checkpoint._enable_checkpoint_early_stop = False
