"""Text to a 64-bit simhash fingerprint and a verification sketch. Pure: no file, no store.

Imports only the exception hierarchy and :mod:`simstore.results` from above.

Modules, in the order a text goes through them:

- ``text``: Text preparation for fingerprinting: normalise, then tokenise.
- ``tokens``: One normalise-and-tokenise pass over a batch of texts: ``TokenBatch``.
- ``hashing``: The hashes of the text fingerprint: tokens, n-gram folds, and version 1's
  feature strings.
- ``features``: The features of a text: its n-grams.
- ``vote``: Weights and the weighted bit vote.
- ``algorithms``: The text fingerprint's versions, one registry over the same tokens.
- ``sketch``: The verification sketch: a small estimate of the Jaccard similarity of two
  documents' word 3-shingles, independent of the 64-bit fingerprint.
- ``fingerprinter``: 64-bit simhash fingerprints of text (Chinese, other scripts, or mixed):
  ``Fingerprinter``, its settings, and one pass from texts to fingerprints and sketches.
- ``vectors``: Fingerprints of dense vectors: random-hyperplane simhash.
- ``pool``: Fingerprinting on several cores: worker processes that die with their
  parent, speak msgpack over pipes, and never import the caller's script.
- ``_worker``: A fingerprinting worker process (see :mod:`simstore.fingerprinting.pool`).
- ``_check``: Argument checks shared by the fingerprinter and vector fingerprints.
- ``reference``: The specifications in plain Python, for tests; nothing else imports it.
"""
