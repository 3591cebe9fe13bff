"""`python -m agent_rl` is the `agent-rl` command."""

from agent_rl.cli.main import main

main()
