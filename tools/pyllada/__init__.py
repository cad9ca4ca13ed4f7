"""pyllada: an independent PyTorch implementation of the LLaDA forward and sampler.

Development tool only (golden fixtures, training); never part of the Go product.
Modules: safetensors_io (read/write .safetensors without the python package),
model (LLaDAConfig, LLaDA, load/save in LLaDA's HF layout), generate (the
low-confidence remasking sampler of LLaDA's generate.py), report (the JSON reports
of the tools that run it).
"""
