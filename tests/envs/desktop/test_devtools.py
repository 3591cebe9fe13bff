"""The DevTools client's pipes: closing it never touches a descriptor it no longer owns.

A process reuses descriptor numbers at once, so a second close of a number, or a read on one
another thread closed, hits whatever was opened since: in a test run, a pooled Python sandbox's
request channel, whose interpreter then exits with status 0 before its first call."""

from __future__ import annotations

import os

from envs.desktop.devtools import DevTools


def _client() -> tuple[DevTools, int, int]:
    """A client on two pipes whose browser ends the test holds."""
    command_read, command_write = os.pipe()
    message_read, message_write = os.pipe()
    return DevTools(command_write, message_read, serve=lambda url: None), command_read, message_write


def test_closing_twice_leaves_a_reused_descriptor_open() -> None:
    devtools, command_read, message_write = _client()
    devtools.close()
    reused_read, reused_write = os.pipe()  # takes the numbers the client just gave back
    try:
        devtools.close()
        os.write(reused_write, b"still mine")
        assert os.read(reused_read, 64) == b"still mine"
    finally:
        for fd in (reused_read, reused_write, command_read, message_write):
            os.close(fd)


def test_the_reader_keeps_its_pipe_until_the_browser_end_closes_then_closes_it() -> None:
    devtools, command_read, message_write = _client()
    devtools.close()
    assert devtools._reader.is_alive(), "the reader still owns the message pipe"
    os.close(message_write)  # the browser exits
    devtools._reader.join(timeout=5)
    assert not devtools._reader.is_alive()
    reused_read, reused_write = os.pipe()
    try:
        os.write(reused_write, b"x")
        assert os.read(reused_read, 1) == b"x"
    finally:
        for fd in (reused_read, reused_write, command_read):
            os.close(fd)
