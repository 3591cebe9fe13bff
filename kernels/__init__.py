"""Matched, batch-invariant kernels shared by the rollout (vLLM) and the learner.

`kernels.ops` is the op set, `kernels.llama.MatchedLlama` the model built from it,
`kernels.vllm_model` the same model inside vLLM, registered by `kernels.vllm_plugin`.
Nothing here imports agent_rl or envs.
"""
