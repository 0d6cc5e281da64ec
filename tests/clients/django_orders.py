"""Django, unchanged: a model with Django's default key (BigAutoField, an
identity column since Django 4.1), filled by several threads with save() and
bulk_create(). The table's sequence is registered after Django created the
table; nothing here knows about snowflake_id.

    python django_orders.py PORT DATABASE SESSIONS ORDERS
"""

import sys
import threading

import django
from django.conf import settings

port, database, sessions, orders = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
settings.configure(
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": database,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": port,
        }
    },
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    INSTALLED_APPS=[],
)
django.setup()

from django.db import connection, connections, models  # noqa: E402


class Order(models.Model):
    session = models.IntegerField()
    n = models.IntegerField()

    class Meta:
        app_label = "shop"
        db_table = "orders"


if sys.argv[5:] == ["create"]:
    with connection.schema_editor() as editor:
        editor.create_model(Order)
    sys.exit(0)

failed = []


def work(session):
    try:
        made = []
        for n in range(0, orders // 2):
            o = Order(session=session, n=n)
            o.save()
            made.append(o.pk)
        batch = Order.objects.bulk_create([Order(session=session, n=n) for n in range(orders // 2, orders)])
        made.extend(o.pk for o in batch)
        # The keys Django got back are the stored ones.
        stored = list(Order.objects.filter(session=session).order_by("n").values_list("pk", flat=True))
        assert stored == made, f"session {session}: keys returned differ from those stored"
    except Exception as e:  # noqa: BLE001
        failed.append(repr(e))
    finally:
        connections.close_all()


threads = [threading.Thread(target=work, args=(s,)) for s in range(sessions)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    sys.exit("; ".join(failed))
