"""GPT-2 generation engine served by the Triton Python backend in model_repository/gpt2.

Stages: `presets` builds or loads the model, `tokenizer` turns text into ids, `sampling_params`
validates what a request asks for, `scheduler` picks which sequences run each step, `runner` runs
GPT-2 over the KV cache, `sampler` picks tokens, `detokenizer` turns them into safe text deltas,
`engine` ties one step together and `engine_loop` runs it on its own thread.
"""
