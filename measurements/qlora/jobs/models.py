"""The model shapes the QLoRA jobs use (docs/spec.md's presets of the same
names), and where their random bf16 checkpoints live on the GPU machine."""
import os

CHECKPOINTS = os.environ.get("QLORA_CHECKPOINTS", "/tmp/qlora-checkpoints")


def config(arch):
    from transformers import LlamaConfig, Qwen2Config

    if arch == "llama1b":  # llama-3.2-1b
        return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                           num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True,
                           max_position_embeddings=131072, rope_theta=500000.0)
    if arch == "llama8b":  # llama-3.1-8b
        return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                           max_position_embeddings=131072, rope_theta=500000.0)
    if arch == "qwen1p5b":  # qwen2.5-1.5b
        return Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                           num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True,
                           max_position_embeddings=32768, rope_theta=1000000.0)
    if arch == "qwen7b":  # qwen2.5-7b
        return Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                           num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False,
                           max_position_embeddings=32768, rope_theta=1000000.0)
    raise SystemExit(f"unknown arch {arch!r}: llama1b, llama8b, qwen1p5b or qwen7b")


def checkpoint(arch):
    return os.path.join(CHECKPOINTS, arch)
