"""The main job's Python tasks played over an OpenAI client, as `agent_rl/PythonTool-v0` plays them.

The agent keeps the env's own tools and grader (a `PythonToolEnv` on its one task: the sandboxed
interpreter, the text of a tool result, the feedback on a malformed call, the verifier, the turn
limit) and talks to the model only through the `openai` client. So on the same model its greedy
episodes are the env loop's token for token, and any difference between the two paths would be the
endpoint's. A real agent would run its own tools here; the conversation is what matters.

    agent-rl eval --model default --tasks agent_rl/PythonTool-v0 --agent examples.python_tool_agent:run

The env runs with its defaults (8 turns): an evaluation whose env takes other `env_kwargs` needs
them here too.
"""

from __future__ import annotations

import json
from typing import Any

from envs.python_tool import PYTHON_SYSTEM_PROMPT, PythonToolEnv
from envs.tool_calls import format_tool_call


async def run(task: dict[str, Any], client: Any) -> float:
    """Play one task; `client` is an `openai.AsyncOpenAI` whose base URL is this episode's."""
    env = PythonToolEnv(tasks=[task])
    try:
        _, info = env.reset(options={"task": 0})
        messages: list[dict[str, Any]] = [{"role": "system", "content": PYTHON_SYSTEM_PROMPT},
                                          {"role": "user", "content": task["prompt"]}]
        while True:
            reply = await client.chat.completions.create(model="policy", messages=messages,
                                                         tools=info["tools"])
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            calls = message.tool_calls or []
            # A turn with a malformed call comes back whole as content, without tool_calls.
            turn = "\n".join([message.content or "", *(
                format_tool_call(call.function.name, json.loads(call.function.arguments))
                for call in calls)]).strip()
            observation, reward, terminated, truncated, _ = env.step(turn)
            if terminated or truncated:
                return reward
            messages += _as_openai(observation, calls)
    finally:
        env.close()


def _as_openai(observation: list[dict[str, Any]], calls: list[Any]) -> list[dict[str, Any]]:
    """The env's reply as OpenAI messages: a tool result answers its call by id; the env's
    other messages (a skipped-calls note, feedback as a user turn) go as they are, a tool
    message naming its tool."""
    pending = list(calls)
    replies = []
    for message in observation:
        if message["role"] == "tool" and pending and pending[0].function.name == message["name"]:
            replies.append({"role": "tool", "tool_call_id": pending.pop(0).id,
                            "content": message["content"]})
        else:
            replies.append(dict(message))
    return replies
