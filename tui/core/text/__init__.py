"""Text a person reads, made safe and shaped: every number formatted in one place
(``fmt``), untrusted text made inert for a terminal (``safetext``) or Markdown
(``mdtext``), a token never shown (``redact``), text fitted to a width (``textfit``), the
viewer's words in the person's language (``i18n``). The base every other wing may use.
"""
