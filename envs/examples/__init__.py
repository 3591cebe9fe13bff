"""Worked examples of new environments built on `envs.tool_env.ToolEnv`."""
