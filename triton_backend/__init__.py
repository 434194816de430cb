"""GPT-2 generation engine served by the Triton Python backend in model_repository/gpt2.

Stages: `presets` builds or loads the model, `tokenizer` turns text into ids, `sampling_params`
validates what a request asks for, `scheduler` picks which sequences run each step and hands out
the KV cache's pages (`kv_pages`; its seam is `scheduler_interface`; none of them imports torch, so
the simulator runs it too), `runner` runs GPT-2 over the cache's tensors (`kv_cache`), `sampler`
picks tokens, `detokenizer` turns them into safe text deltas, `engine` ties one step together
(`engine_factory` builds it) and `engine_loop` runs it on its own thread.
"""
