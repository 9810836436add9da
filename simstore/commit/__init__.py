"""Single writes to the disk: the group commit across threads, and across processes through
the writers' mailbox; explicit batches. Sits on the engine, which knows it only as
:class:`simstore.engine.core.CommitHooks`.

Modules:

- ``batch``: Explicit batches: the writes of one ``with store.batch() as batch:`` block,
  gathered in their thread and committed together at its end (by
  :class:`simstore.commit.group.GroupCommit`).
- ``group``: Group commit, write batches and interval flushing: how single writes reach
  the disk.
- ``mailbox``: The writers' mailbox: a side file where processes hand their single
  writes to whichever process commits next.
- ``posted``: Other processes' writes in a commit this process leads, through the
  writers' mailbox (:mod:`simstore.commit.mailbox`): taken from their slots, run in this
  process's transaction, and answered once it is durable; and the slots a leader that
  died left taken.
- ``queue``: The parts of a group commit (:mod:`simstore.commit.group`): a caller's
  write waiting for a transaction, the queue it waits in, and what a group's writes did
  to the in-memory delta, to undo it if their transaction does not commit.
- ``wire``: What crosses the writers' mailbox (:mod:`simstore.commit.mailbox`): a
  process's single writes, and each one's outcome, in msgpack.
"""
