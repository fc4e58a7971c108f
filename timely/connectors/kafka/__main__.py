"""python -m timely.connectors.kafka demo-clicks --brokers HOST:PORT [...]: write demo input for examples/page_totals.py.

``demo-clicks`` writes ``--epochs`` epochs of ``--per-epoch`` clicks (``{"page",
"user"}``) to ``--topic`` (default ``clicks``, created with ``--partitions`` if
missing), each epoch followed by its epoch-end markers (``timely.connectors.epochs``),
and prints, after each epoch, the page totals a job counting clicks per page must
find. The same ``--seed`` gives the same clicks. Bad arguments, an unreachable broker,
or a topic that already holds epochs stop it with exit status 2 and the reason
(``demo``: what it costs).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from ..client import BrokerUnreachable, ConnectorError
from .demo import PAGES, clicks, running_totals, write_clicks


def _positive(text: str, most: Optional[int] = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"at most {most} ({', '.join(PAGES)}), got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m timely.connectors.kafka",
                                     description="Kafka tools for pytimely's connectors.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo-clicks", description=__doc__.splitlines()[0].split(": ", 1)[1],
                          help="write epochs of demo clicks under the epoch contract")
    demo.add_argument("--brokers", required=True, metavar="HOST:PORT", help="the Kafka broker(s), comma-separated")
    demo.add_argument("--topic", default="clicks")
    demo.add_argument("--epochs", type=_positive, default=5, help="epochs 0 .. N-1 (default 5)")
    demo.add_argument("--per-epoch", type=_positive, default=20, help="clicks per epoch (default 20)")
    demo.add_argument("--pages", type=lambda text: _positive(text, len(PAGES)), default=5,
                      help=f"how many of {', '.join(PAGES)} are clicked (default 5)")
    demo.add_argument("--partitions", type=_positive, default=2,
                      help="the topic's partitions, if it is created (default 2)")
    demo.add_argument("--seed", type=int, default=0, help="the same seed gives the same clicks (default 0)")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    by_epoch = clicks(args.epochs, args.per_epoch, args.pages, args.seed)
    totals = running_totals(by_epoch)
    try:
        for epoch, partitions in write_clicks(args.brokers, args.topic, by_epoch, args.partitions):
            if epoch == 0:
                print(f"demo-clicks: topic {args.topic!r} at {args.brokers} "
                      f"({partitions} partitions, seed {args.seed})", flush=True)
            shown = ", ".join(f"{page} {n}" for page, n in totals[epoch].items())
            print(f"epoch {epoch}: {len(by_epoch[epoch])} clicks and their markers written; "
                  f"page totals so far: {shown}", flush=True)
    except ConnectorError as exc:
        hint = (" (is a broker running there? `python -m broker serve` starts one)"
                if isinstance(exc, BrokerUnreachable) else "")
        print(f"demo-clicks: {exc}{hint}", file=sys.stderr)
        return 2
    print(f"demo-clicks: done, epochs 0-{args.epochs - 1}; a job reading them to the end "
          f"takes end_epoch={args.epochs} (examples/page_totals.py --epochs {args.epochs})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
