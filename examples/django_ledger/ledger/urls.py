from __future__ import annotations

from django.urls import path
from payments import views

urlpatterns = [
    path("", views.health),
    path("customers/<uuid:customer_id>/payments", views.pay),
]
