from __future__ import annotations

from django.urls import include, path
from notes import views
from rest_framework.authtoken.views import obtain_auth_token

urlpatterns = [
    path("", views.health),
    path("accounts/", include("django.contrib.auth.urls")),
    path("notes/new/", views.new_note, name="new-note"),
    path("notes/<int:pk>/summary/", views.summary),
    path("api/token/", obtain_auth_token),
    path("api/notes/", views.NoteList.as_view()),
]
