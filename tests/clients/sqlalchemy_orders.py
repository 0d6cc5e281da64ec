"""SQLAlchemy, unchanged: a table whose key has a Sequence default, filled by
several threads, implicitly (an INSERT that lets SQLAlchemy fill the key:
nextval in the statement) and explicitly (the application asks the sequence,
then inserts the value). The sequence is registered after SQLAlchemy created
it; nothing here knows about snowflake_id.

    python sqlalchemy_orders.py PORT DATABASE SESSIONS ORDERS [create]
"""

import sys
import threading

from sqlalchemy import BigInteger, Column, Integer, MetaData, Sequence, Table, create_engine, insert, select

port, database, sessions, orders = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
engine = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{database}", pool_size=sessions)
metadata = MetaData()
order_seq = Sequence("orders_id_seq")
orders_table = Table(
    "orders",
    metadata,
    Column("id", BigInteger, order_seq, primary_key=True),
    Column("session", Integer, nullable=False),
    Column("n", Integer, nullable=False),
)

if sys.argv[5:] == ["create"]:
    metadata.create_all(engine)
    sys.exit(0)

failed = []


def work(session):
    try:
        with engine.begin() as conn:
            for n in range(0, orders // 2):
                # Implicit: the key comes from the Sequence default.
                conn.execute(insert(orders_table).values(session=session, n=n))
            for n in range(orders // 2, orders):
                # Explicit: the application takes the next value first.
                key = conn.execute(select(order_seq.next_value())).scalar_one()
                conn.execute(insert(orders_table).values(id=key, session=session, n=n))
    except Exception as e:  # noqa: BLE001
        failed.append(repr(e))


threads = [threading.Thread(target=work, args=(s,)) for s in range(sessions)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    sys.exit("; ".join(failed))
