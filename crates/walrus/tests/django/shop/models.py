"""Models that use what a typical application needs of its database: foreign keys with
CASCADE and PROTECT, a unique constraint over two columns, DecimalField, JSONField."""
from django.db import models


class Category(models.Model):
    name = models.CharField(max_length=50, unique=True)


class Product(models.Model):
    category = models.ForeignKey(Category, on_delete=models.PROTECT, related_name="products")
    name = models.CharField(max_length=100)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    attrs = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["category", "name"], name="shop_product_category_name_uniq")
        ]


class Order(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="orders")
    qty = models.IntegerField()
    created = models.DateTimeField(auto_now_add=True)
