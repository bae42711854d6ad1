"""Text helpers."""


def shout(text):
    return text.upper()
