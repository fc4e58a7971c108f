"""Exchange, broadcast, concat and a per-epoch reduction, for comparing cluster shapes.

Prints one line per worker: ``result {json}`` with the records each of its captures
saw per epoch. The test merges the lines of every process and compares clusters of
different shapes (-n / -w), which must agree.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import timely  # noqa: E402
from timely import Exchange  # noqa: E402


def main(argv):
    config = timely.Config.from_args(argv)

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            exchanged = stream.exchange(lambda x: x[0])
            seen = exchanged.map(lambda x: (x[0], x[1], "exchanged")).capture()
            broadcast = stream.filter(lambda x: x[0] % 5 == 0).broadcast().capture()
            sums = {}

            def reduce(input, output, notificator):
                for cap, records in input:
                    if cap.time not in sums:
                        sums[cap.time] = {}
                        notificator.notify_at(cap.retain())
                    for key, value in records:
                        sums[cap.time][key % 3] = sums[cap.time].get(key % 3, 0) + value
                for cap in notificator:
                    output.give_batch(cap, sorted(sums.pop(cap.time).items()))
                    cap.drop()
            totals = exchanged.concat(stream.map(lambda x: (x[0] + 100, 1))).unary_notify(
                Exchange(lambda x: x[0] % 3), "Reduce", [], reduce)
            return source, seen, broadcast, totals.capture(), totals.probe()

        source, seen, broadcast, totals, probe = worker.dataflow(dataflow)
        for epoch in range(4):
            if worker.index == 0:
                source.send_batch([(k, epoch * 10 + k) for k in range(40)])
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(source.time()))
        source.close()
        worker.run()
        sys.stdout.write("result " + json.dumps({
            "worker": worker.index,
            "exchanged": {str(t): sorted(map(list, rs)) for t, rs in seen.by_time().items()},
            "broadcast": {str(t): sorted(map(list, rs)) for t, rs in broadcast.by_time().items()},
            "totals": {str(t): sorted(map(list, rs)) for t, rs in totals.by_time().items()}}) + "\n")

    timely.execute(config, build)


if __name__ == "__main__":
    main(sys.argv[1:])
