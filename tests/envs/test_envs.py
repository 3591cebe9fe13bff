"""The registered environments: Gymnasium's API checks, and whole episodes on the real sandbox."""

from __future__ import annotations

import doctest
import pickle
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs import python_tool, tool_env
from envs.episode import run_episode
from envs.policies import OraclePolicy, ScriptedPolicy
from envs.tasks import CATEGORIES, load_tasks
from envs.tool_calls import format_tool_call
from envs.tool_env import EpisodeNotRunningError, ToolEnv, UnknownTaskError

ENV_IDS = [env_id for env_id in gymnasium.registry if env_id.startswith("agent_rl/")]
ADD_TASK = {"task_id": "add-1", "category": "arithmetic", "prompt": "What is 17 + 25?",
            "answer": "42", "verifier": "numeric", "extra": "{}"}
CODE_TASK = {
    "task_id": "code-1", "category": "code", "prompt": "Write `double(x)`.",
    "answer": "def double(x):\n    return 2 * x\n", "verifier": "unit_tests",
    "extra": '{"tests": "assert double(2) == 4\\nassert double(-1) == -2\\n"}',
}


def python(code: str) -> str:
    return format_tool_call("python", {"code": code})


def answer(value: str) -> str:
    return format_tool_call("answer", {"answer": value})


def make(env_id: str, **kwargs):
    try:
        return gymnasium.make(env_id, **kwargs)
    except (ImportError, AttributeError) as error:
        pytest.skip(f"{env_id} cannot be built here yet: {error}")


@pytest.fixture(scope="module")
def sandbox_available() -> None:
    from envs.sandbox_pool import SandboxUnavailableError, acquire_session

    try:
        session, pool = acquire_session()
    except SandboxUnavailableError as error:
        pytest.skip(f"no sandbox on this machine: {error}")
    pool.release(session)


@pytest.fixture
def python_env(sandbox_available):
    env = gymnasium.make("agent_rl/PythonTool-v0", split="heldout", max_turns=4)
    yield env
    env.close()


def test_registry_holds_the_contract_ids():
    assert {"agent_rl/PythonTool-v0", "agent_rl/Desktop-v0"} <= set(ENV_IDS)
    assert set(envs.registration.ENV_IDS) == set(ENV_IDS)


@pytest.mark.parametrize("env_id", [
    pytest.param(env_id, marks=pytest.mark.slow) if "Desktop" in env_id else env_id
    for env_id in ENV_IDS])  # a real desktop per check: slow
def test_gymnasium_check_env_passes_without_warnings(env_id):
    env = make(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_passive_checker_wrappers_see_valid_resets_and_steps(env_id):
    env = make(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            observation, _ = env.reset(seed=3)
            assert observation in env.observation_space
            observation, reward, *_ = env.step(env.action_space.sample())
            assert observation in env.observation_space and isinstance(reward, float)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_spec_pickles_and_remakes_the_env(env_id):
    env = make(env_id)
    spec = pickle.loads(pickle.dumps(env.spec))
    env.close()
    assert spec == env.spec
    gymnasium.make(spec).close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_gives_the_same_episode(env_id):
    def rollout() -> list:
        env = make(env_id)
        env.action_space.seed(7)
        transcript = list(env.reset(seed=7))
        for _ in range(3):
            observation, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            transcript.append((observation, reward, terminated, truncated))
            if terminated or truncated:
                break
        env.close()
        return transcript

    assert rollout() == rollout()


def test_right_answer_via_the_python_tool_gets_reward_1(python_env):
    record = run_episode(python_env, ScriptedPolicy([python("print(17 + 25)"), answer("42")]),
                         task=ADD_TASK)
    assert record.messages[3] == {"role": "tool", "name": "python", "content": "42"}
    assert (record.reward, record.terminated, record.truncated) == (1.0, True, False)
    assert record.step_infos[-1]["verdict"]["correct"] is True


def test_an_interpreter_that_dies_is_counted_in_the_episodes_info(python_env):
    """The model sees a restart either way; the count lets an evaluation tell the two apart."""
    policy = ScriptedPolicy([python("import os\nos._exit(0)"), python("print(1)"), answer("42")])
    record = run_episode(python_env, policy, task=ADD_TASK)
    assert [info["interpreter_deaths"] for info in record.step_infos] == [1, 1, 1]
    record = run_episode(python_env, ScriptedPolicy([python("print(1)"), answer("42")]),
                         task=ADD_TASK)
    assert record.step_infos[-1]["interpreter_deaths"] == 0


def test_wrong_answer_gets_reward_0_and_ends_the_episode(python_env):
    record = run_episode(python_env, ScriptedPolicy([answer("41")]), task=ADD_TASK)
    assert (record.reward, record.terminated, record.turns) == (0.0, True, 1)


def test_answer_tag_is_accepted_as_the_final_answer(python_env):
    record = run_episode(python_env, ScriptedPolicy(["So: <answer>42</answer>"]), task=ADD_TASK)
    assert (record.reward, record.terminated) == (1.0, True)


def test_malformed_call_gets_feedback_and_the_episode_continues(python_env):
    python_env.reset(options={"task": ADD_TASK})
    observation, reward, terminated, truncated, info = python_env.step(
        '<tool_call>{"name": "python", "arguments": {"code": 17}}</tool_call>'
    )
    assert observation == [{"role": "user", "content": info["errors"][0].join(["Error: ", ""])}]
    assert "'code' must be of type string" in observation[0]["content"]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert python_env.step(answer("42"))[1] == 1.0


def test_turn_budget_truncates_the_episode(python_env):
    record = run_episode(python_env, ScriptedPolicy(["thinking..."] * 4), task=ADD_TASK)
    assert (record.terminated, record.truncated, record.turns) == (False, True, 4)
    assert record.step_infos[-1]["end_reason"] == "max_turns"
    with pytest.raises(EpisodeNotRunningError, match="call reset"):
        python_env.step(answer("42"))


def test_token_budget_truncates_the_episode(sandbox_available):
    env = gymnasium.make("agent_rl/PythonTool-v0", max_tokens=600, max_turns=50)
    record = run_episode(env, ScriptedPolicy([python("print('x' * 500)")] * 50), task=ADD_TASK)
    env.close()
    assert record.truncated and record.step_infos[-1]["end_reason"] == "max_tokens"
    assert record.turns < 50


@pytest.mark.parametrize("end_on_timeout", [True, False])
def test_hung_python_call_is_killed_and_ends_the_episode_unless_asked_not_to(
    sandbox_available, end_on_timeout
):
    from sandbox import SandboxConfig

    env = gymnasium.make("agent_rl/PythonTool-v0", end_on_timeout=end_on_timeout,
                         sandbox_config=SandboxConfig(timeout_s=1.0))
    try:
        env.reset(options={"task": ADD_TASK})
        observation, reward, terminated, truncated, info = env.step(python("while True: pass"))
        assert "time limit" in observation[0]["content"] and (reward, terminated) == (0.0, False)
        assert truncated == end_on_timeout
        assert info["end_reason"] == ("sandbox_timeout" if end_on_timeout else None)
        if not end_on_timeout:
            assert env.step(answer("42"))[1] == 1.0
    finally:
        env.close()


def test_a_failed_first_reset_does_not_break_the_env():
    """gymnasium.make's passive checker would fail every later step after a first reset that
    raised; ours are registered without it, so the next reset starts a normal episode."""
    env = gymnasium.make("agent_rl/PythonTool-v0")
    with pytest.raises(Exception, match="no-such-task"):
        env.reset(options={"task": "no-such-task"})
    env.reset(options={"task": 0})
    *_, info = env.step(answer("42"))
    assert isinstance(info, dict)
    env.close()


def test_a_sandbox_that_cannot_start_breaks_the_step_not_the_agents_reward(monkeypatch):
    """No bubblewrap on PATH: the step raises, so the episode has no verdict (the rollout
    counts it as an env error) instead of the model reading an error and scoring 0."""
    from envs.errors import EnvBrokenError
    from sandbox import SandboxConfig

    monkeypatch.setenv("PATH", "/nonexistent")
    env = gymnasium.make("agent_rl/PythonTool-v0",
                         sandbox_config=SandboxConfig(timeout_s=1.25, start_timeout_s=2.0))
    try:
        env.reset(options={"task": ADD_TASK})
        with pytest.raises(EnvBrokenError, match="bwrap"):
            env.step(python("print(1)"))
    finally:
        env.close()


def test_python_state_persists_within_an_episode_and_not_across(python_env):
    record = run_episode(python_env, ScriptedPolicy([python("x = 20"), python("x + 22"),
                                                     answer("42")]), task=ADD_TASK)
    assert record.messages[5]["content"] == "42"
    python_env.reset(options={"task": ADD_TASK})
    observation = python_env.step(python("print(x)"))[0]
    assert "NameError" in observation[0]["content"]


def test_python_exception_comes_back_as_a_tool_message(python_env):
    python_env.reset(options={"task": ADD_TASK})
    observation, _, terminated, _, _ = python_env.step(python("1 / 0"))
    assert observation[0]["role"] == "tool" and "ZeroDivisionError" in observation[0]["content"]
    assert not terminated


def test_code_task_is_verified_by_unit_tests_in_the_sandbox(python_env):
    right = run_episode(python_env, ScriptedPolicy([answer(CODE_TASK["answer"])]), task=CODE_TASK)
    wrong = run_episode(python_env, ScriptedPolicy([answer("```python\ndef double(x):\n"
                                                           "    return x + 2\n```")]),
                        task=CODE_TASK)
    assert right.reward == 1.0
    assert wrong.reward == 0.0 and "AssertionError" in wrong.step_infos[-1]["verdict"]["detail"]


@pytest.mark.parametrize("category", CATEGORIES)
def test_oracle_policy_solves_a_task_of_each_category(python_env, category):
    task = load_tasks("heldout", categories=[category])[0]
    record = run_episode(python_env, OraclePolicy(task), task=task)
    assert record.reward == 1.0, record.messages[-3:]


def test_task_can_be_chosen_by_index_or_id(python_env):
    task = load_tasks("heldout")[5]
    assert python_env.reset(options={"task": 5})[1]["task_id"] == task["task_id"]
    assert python_env.reset(options={"task": task["task_id"]})[1]["task_id"] == task["task_id"]
    with pytest.raises(UnknownTaskError, match="no task with id 'nope'"):
        python_env.reset(options={"task": "nope"})


def test_reset_info_carries_the_tool_schemas(python_env):
    messages, info = python_env.reset(seed=0)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert [schema["function"]["name"] for schema in info["tools"]] == ["python", "answer"]
    assert '"name": "python"' in messages[0]["content"]


def test_word_count_example_is_a_complete_env():
    env = gymnasium.make("agent_rl/WordCount-v0")
    _, info = env.reset(seed=1)
    sentence = env.unwrapped.task["prompt"].split("\n\n")[1]
    count = format_tool_call("count_words", {"text": sentence})
    record = run_episode(env, ScriptedPolicy([count, answer(str(len(sentence.split())))]),
                         task=info["task_id"])
    assert record.messages[3]["content"] == str(len(sentence.split()))
    assert record.reward == 1.0
    near = run_episode(env, ScriptedPolicy([answer(str(len(sentence.split()) + 1))]),
                       task=info["task_id"])
    assert near.reward == pytest.approx(0.1)


def test_tool_env_needs_only_a_dataset_tools_and_a_reward():
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: What to shout.
        """
        return text.upper()

    env = ToolEnv([{"prompt": "Shout 'hi'.", "answer": "HI"}], tools=[shout],
                  reward_fn=lambda given, task: given == task["answer"])
    record = run_episode(env, ScriptedPolicy([format_tool_call("shout", {"text": "hi"}),
                                              answer("HI")]), seed=0)
    assert record.messages[3]["content"] == "HI" and record.reward == 1.0


def test_a_custom_answer_tool_may_name_its_argument_freely():
    def answer(code: str) -> str:
        """Submit the final program.

        Args:
            code: The whole program.
        """
        return "Submitted."

    env = ToolEnv([{"prompt": "Print 1.", "answer": "print(1)"}], tools=[answer],
                  reward_fn=lambda given, task: given == task["answer"])
    record = run_episode(env, ScriptedPolicy([format_tool_call("answer", {"code": "print(1)"})]),
                         seed=0)
    assert record.reward == 1.0

    def no_argument() -> str:
        """Submit nothing."""
        return ""

    no_argument.__name__ = "answer"
    with pytest.raises(ValueError, match="first parameter"):
        ToolEnv([{"prompt": "p", "answer": "a"}], tools=[no_argument])


@pytest.mark.parametrize("module", [tool_env, python_tool])
def test_env_docstring_examples_run(module, sandbox_available):
    assert doctest.testmod(module, raise_on_error=True).attempted > 0


def test_calls_past_the_per_turn_limit_are_skipped_and_long_results_cut():
    def echo(text: str) -> str:
        """Return the text.

        Args:
            text: What to return.
        """
        return text

    env = ToolEnv([ADD_TASK], tools=[echo], max_calls_per_turn=2, max_result_chars=10)
    env.reset(seed=0)
    turn = "".join(format_tool_call("echo", {"text": "x" * 25}) for _ in range(5))
    observation, _, terminated, _, info = env.step(turn)
    assert [m["name"] for m in observation] == ["echo", "echo", "error"]
    assert observation[0]["content"] == "x" * 10 + "\n[output cut: 15 more characters]"
    assert "3 were skipped" in observation[2]["content"]
    assert len(info["tool_calls"]) == 2 and not terminated


def test_plain_text_answers_end_the_episode_only_when_asked_for():
    strict = ToolEnv([ADD_TASK], tools=[])
    strict.reset(seed=0)
    observation, reward, terminated, _, info = strict.step("The answer is 42.")
    assert not terminated and reward == 0.0 and observation[0]["role"] == "user"

    lenient = ToolEnv([ADD_TASK], tools=[], plain_text_answers=True)
    lenient.reset(seed=0)
    observation, reward, terminated, _, info = lenient.step("The answer is 42.")
    assert terminated and reward == 1.0 and observation == []
    assert info["end_reason"] == "answer" and info["answer"] == "The answer is 42."

    lenient.reset(seed=0)
    observation, reward, terminated, _, info = lenient.step('<tool_call>{"name": oops</tool_call>')
    assert not terminated and info["errors"], "a malformed call still gets feedback, not a grade"


def test_python_tool_env_passes_plain_text_answers_on():
    env = gymnasium.make("agent_rl/PythonTool-v0", tasks=[ADD_TASK], plain_text_answers=True)
    env.reset(seed=0)
    _, reward, terminated, _, _ = env.step("42")
    env.close()
    assert terminated and reward == 1.0
