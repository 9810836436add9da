"""Text to a 64-bit simhash fingerprint and a verification sketch. Pure: no file, no store.

Imports only the exception hierarchy and :mod:`simstore.results` from above.

Modules:

- ``_worker``: A fingerprinting worker process (see :mod:`simstore.fingerprinting.pool`).
- ``fingerprinter``: 64-bit simhash fingerprints of text (Chinese, other scripts, or
  mixed) and of dense vectors.
- ``pool``: Fingerprinting on several cores: worker processes that die with their
  parent, speak msgpack over pipes, and never import the caller's script.
- ``sketch``: The verification sketch: a small estimate of the Jaccard similarity of two
  documents' word 3-shingles, independent of the 64-bit fingerprint.
- ``text``: Text preparation for fingerprinting: normalise, then tokenise.
- ``version2``: Version 2 of the text fingerprint (``simstore-text-simhash-2``): the
  features of a whole batch hashed and voted with numpy over its UTF-8 bytes.
"""
