from __future__ import annotations

from django.urls import path
from ledger import views

urlpatterns = [
    path("", views.health),
    path("api/customers/<uuid:customer_id>/payments", views.pay),
]
