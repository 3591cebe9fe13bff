"""The desktop's observation modes: the text listing (the default), the screenshot, or both, as
the content-part lists that vision-language models' chat templates take."""

from __future__ import annotations

import base64
import io
import shutil
from pathlib import Path

import pytest
from PIL import Image
from transformers import AutoTokenizer

from agent_rl.rollout.chat_tokens import ChatTemplateError, ChatTokens, EpisodeTokens
from envs.desktop import DesktopEnv
from envs.desktop.apps import APT_PACKAGES
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.tool_calls import format_tool_call

VISION_TEMPLATE = Path(__file__).parents[2] / "data" / "vision_chat_template.jinja"
_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal") if not shutil.which(program)]
needs_desktop = pytest.mark.skipif(
    bool(_missing), reason=f"desktop programs missing: {', '.join(_missing)} (apt-get install -y "
    f"--no-install-recommends {APT_PACKAGES})")
TASK = "terminal-make-folder"


def screenshot_of(part: dict) -> Image.Image:
    assert part["type"] == "image_url"
    header, data = part["image_url"]["url"].split(",", 1)
    assert header == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(data)))


def play_one_wait(observation: str) -> tuple[list[dict], list[dict], DesktopEnv]:
    env = DesktopEnv(split="train", observation=observation)
    opening, _ = env.reset(options={"task": TASK})
    reply, *_ = env.step(format_tool_call("WAIT", {}))
    return opening, reply, env


@needs_desktop
@pytest.mark.parametrize("observation", ["screenshot", "both"])
def test_image_observations_are_user_messages_with_the_screenshot(observation: str) -> None:
    opening, reply, env = play_one_wait(observation)
    try:
        for messages in (opening, reply):
            assert env.observation_space.contains(messages)
            screen = messages[-1]
            assert screen["role"] == "user" and isinstance(screen["content"], list)
            text, image = screen["content"]
            assert text["type"] == "text" and "The screen now" in text["text"]
            assert ("window" in text["text"]) == (observation == "both")  # the listing
            assert screenshot_of(image).size == env.screen_size
        assert reply[0]["role"] == "tool" and isinstance(reply[0]["content"], str)
        assert "Task:" in opening[-1]["content"][0]["text"]
    finally:
        env.close()


@needs_desktop
def test_the_default_observation_is_the_text_listing() -> None:
    opening, reply, env = play_one_wait("text")
    env.close()
    assert all(isinstance(message["content"], str) for message in [*opening, *reply])
    assert "The screen now:" in opening[-1]["content"] and "The screen now:" in reply[-1]["content"]


def test_an_unknown_observation_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match="text, screenshot, both"):
        DesktopEnv(observation="pixels")


@needs_desktop
def test_a_content_list_template_renders_each_screenshot_and_a_text_only_one_refuses(
        tiny_model: Path) -> None:
    """The rollout's token rendering takes image observations where the template does (one
    `<image>` placeholder per screenshot in tests/data/vision_chat_template.jinja), and the
    default model's text-only template refuses them with an error that names the fix."""
    opening, reply, env = play_one_wait("both")
    env.close()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    with pytest.raises(ChatTemplateError, match="observation='text'"):
        EpisodeTokens(ChatTokens(tokenizer), opening)
    tokenizer.chat_template = VISION_TEMPLATE.read_text()
    tokens = EpisodeTokens(ChatTokens(tokenizer), opening)
    assert tokenizer.decode(tokens.opening_ids).count("<image>") == 1
    sampled = tokenizer(format_tool_call("WAIT", {}), add_special_tokens=False)["input_ids"]
    stop = tokens.chat.stop_token_id
    tokens.add_assistant([*sampled, stop], stop)
    assert tokenizer.decode(tokens.add_env(reply)).count("<image>") == 1
