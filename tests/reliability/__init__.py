"""Reliability tests: crashes, concurrency, bad input, full disks, corruption, security."""
