"""Run by `manage.py shell` after `migrate` (tests/applications.rs): the ORM against
walrus, each step checked; any failure raises and exits non-zero."""
from decimal import Decimal

from django.contrib.auth.models import Permission, User
from django.db import IntegrityError, transaction
from django.db.models import Count, ProtectedError, Sum

from shop.models import Category, Order, Product

# The built-in apps' post-migrate work ran: permissions exist for every model.
assert Permission.objects.filter(codename="add_order").exists(), "permissions missing"
User.objects.create_user("alice", password="secret")
assert User.objects.get(username="alice").check_password("secret")

tools = Category.objects.create(name="tools")
toys = Category.objects.create(name="toys")
hammer = Product.objects.create(category=tools, name="hammer", price=Decimal("12.50"), attrs={"color": "red"})
saw = Product.objects.create(category=tools, name="saw", price=Decimal("20.00"), attrs={"color": "blue"})
Product.objects.create(category=toys, name="ball", price=Decimal("3.25"), attrs={})
for q in (1, 2, 3):
    Order.objects.create(product=hammer, qty=q)
Order.objects.create(product=saw, qty=5)

# The unique constraint over (category, name).
try:
    with transaction.atomic():
        Product.objects.create(category=tools, name="hammer", price=Decimal("1.00"))
    raise AssertionError("duplicate (category, name) accepted")
except IntegrityError:
    pass

# annotate(Count) and aggregates over decimals.
counts = {p.name: p.n for p in Product.objects.annotate(n=Count("orders")).order_by("name")}
assert counts == {"ball": 0, "hammer": 3, "saw": 1}, counts
total = Product.objects.filter(category=tools).aggregate(s=Sum("price"))["s"]
assert total == Decimal("32.50"), total

# JSONField lookups.
assert list(Product.objects.filter(attrs__color="red").values_list("name", flat=True)) == ["hammer"]

# select_for_update in a transaction.
with transaction.atomic():
    p = Product.objects.select_for_update().get(name="saw")
    p.price = p.price + Decimal("1.10")
    p.save()
assert Product.objects.get(name="saw").price == Decimal("21.10")

# PROTECT refuses; CASCADE removes the orders.
try:
    tools.delete()
    raise AssertionError("PROTECT did not refuse")
except ProtectedError:
    pass
hammer.delete()
assert Order.objects.count() == 1, Order.objects.count()
print("django check passed")
