"""Subprocess of ``test_cluster_faults.py``: reads group ``argv[2]``'s committed offsets of
``argv[3]`` (partitions 0..2) with :class:`CommittedOffsetsReader` in a loop until stdin
closes, checks each read against ``argv[4]`` (comma-separated offsets), and prints
``ok=<reads> errors=<failed reads> wrong=<reads with other offsets>``. A crash of the process
(the librdkafka admin path died by SIGSEGV when the coordinator moved) shows as its exit code.
"""

from __future__ import annotations

import sys
import threading
import time

from confluent_kafka import KafkaException

from speed_layer.runtime.committed_offsets import CommittedOffsetsReader


def main() -> None:
    bootstrap, group, topic, expected = sys.argv[1], sys.argv[2], sys.argv[3], [int(o) for o in sys.argv[4].split(",")]
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    reader = CommittedOffsetsReader({"bootstrap.servers": bootstrap, "log_level": 0}, group)
    ok = errors = wrong = 0
    while not stop.is_set():
        try:
            offsets = [r.offset for r in reader.read([(topic, p) for p in range(len(expected))], timeout_s=5)]
        except KafkaException:
            errors += 1
            continue
        if offsets == expected:
            ok += 1
        else:
            wrong += 1
        time.sleep(0.01)
    reader.close()
    print(f"ok={ok} errors={errors} wrong={wrong}", flush=True)


if __name__ == "__main__":
    main()
