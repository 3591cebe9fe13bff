"""Gymnasium spaces for chat environments: free text actions and message-list observations."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["AssistantText", "Message", "MessagesSpace", "image_part", "text_part"]

# `content` is a string, or for vision-language models a list of parts in the OpenAI chat
# format: `{"type": "text", "text": ...}` and `{"type": "image_url", "image_url": {"url": ...}}`.
Message = dict[str, Any]

_SAMPLE_WORDS = ("what", "is", "the", "answer", "tool", "call", "python", "42", "print", "x")


def text_part(text: str) -> dict[str, Any]:
    """A text part of a message's content list."""
    return {"type": "text", "text": text}


def image_part(png: bytes) -> dict[str, Any]:
    """An image part of a message's content list: the PNG inline, as a data URL."""
    return {"type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


def _is_part(part: Any) -> bool:
    if not isinstance(part, dict):
        return False
    if part.get("type") == "text":
        return isinstance(part.get("text"), str)
    if part.get("type") == "image_url":
        return isinstance(part.get("image_url"), dict) and isinstance(
            part["image_url"].get("url"), str)
    return False


class AssistantText(spaces.Text):
    """Any Unicode string up to `max_length` characters: one assistant turn.

    `gymnasium.spaces.Text` only contains strings over a fixed character set, but a model can
    write any character, so `contains` accepts all text within the length bounds. `sample`
    draws a short string (at most `SAMPLE_MAX_LENGTH` characters) from Text's alphanumeric
    set: a reproducible turn with no tool call, of a length a model would write.
    """

    SAMPLE_MAX_LENGTH = 256

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, min(self.max_length,
                                                                  self.SAMPLE_MAX_LENGTH) + 1))
        return super().sample(mask=(length, None))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AssistantText(max_length={self.max_length})"


class MessagesSpace(spaces.Space[list[Message]]):
    """Lists of chat messages `{"role": ..., "content": ..., optionally "name": ...}`.

    An element is a list of at most `max_messages` dicts whose `role` is one of `roles`, whose
    `content` is a string of at most `max_content_length` characters (or a list of text and
    image parts, see `Message`) and whose only other allowed key is `name` (a string, used on
    tool messages).
    """

    def __init__(
        self,
        roles: Sequence[str] = ("system", "user", "assistant", "tool"),
        max_messages: int = 64,
        max_content_length: int = 1_000_000,
        seed: int | np.random.Generator | None = None,
    ):
        self.roles = tuple(roles)
        self.max_messages = max_messages
        self.max_content_length = max_content_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list) or len(x) > self.max_messages:
            return False
        return all(self._is_message(message) for message in x)

    def _is_message(self, message: Any) -> bool:
        if not isinstance(message, dict) or not {"role", "content"} <= message.keys():
            return False
        if not message.keys() <= {"role", "content", "name"}:
            return False
        content = message["content"]
        if isinstance(content, list):
            content_ok = all(_is_part(part) for part in content) and sum(
                len(part.get("text", "")) for part in content) <= self.max_content_length
        else:
            content_ok = isinstance(content, str) and len(content) <= self.max_content_length
        return (
            message["role"] in self.roles
            and content_ok
            and isinstance(message.get("name", ""), str)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        if mask is not None or probability is not None:
            raise NotImplementedError("MessagesSpace.sample takes no mask or probability")
        count = int(self.np_random.integers(1, min(self.max_messages, 4) + 1))
        messages = []
        for _ in range(count):
            role = self.roles[int(self.np_random.integers(len(self.roles)))]
            words = self.np_random.choice(_SAMPLE_WORDS, size=int(self.np_random.integers(1, 8)))
            messages.append({"role": role, "content": " ".join(str(word) for word in words)})
        return messages

    def __repr__(self) -> str:
        return f"MessagesSpace(roles={self.roles}, max_messages={self.max_messages})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, MessagesSpace)
            and self.roles == other.roles
            and self.max_messages == other.max_messages
            and self.max_content_length == other.max_content_length
        )
