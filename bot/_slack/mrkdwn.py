"""Text for Slack's mrkdwn: its three control characters escaped, as Slack's "Formatting text
for app surfaces" asks (``&``, ``<`` and ``>``; an unescaped ``<...>`` reads as a link or a
mention, which a C++ kernel's name such as ``elementwise_kernel<...>`` would be)."""


def escape(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` as ``&amp;``, ``&lt;`` and ``&gt;``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
