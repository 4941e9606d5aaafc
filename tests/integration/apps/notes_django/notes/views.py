"""A signed-in user's notes: a CSRF-protected form (session login) and a DRF API (token).

The planted bug: the words-per-line summary divides by the number of line breaks, so a
one-line note answers 500 after it was saved, and so does the summary of a note's one-line
title, and so does the home page of a signed-in user (``GET /``, the summary of the latest
note's title). ``NOTES_FIXED=1`` is the fix.

The summary page names the note by its content type, as generic relations (and Wagtail's
pages) do: the page reads the type through ``ContentType.objects.get_for_model``, the form
posts its id back, and the post finds the note through ``get_for_id``, which a worker that
has served the page answers from Django's content type cache, with no query (a post naming
the type by its natural key, ``notes.note``, to a worker that never read it, queries it).
``NOTES_SUMMARY_COUNT=1`` makes the post count the owner's notes first (a query production
never ran).
"""

from __future__ import annotations

import os

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notes.forms import NoteForm
from notes.models import Note


def words_per_line(body: str) -> float:
    lines = body.count("\n") + 1 if os.environ.get("NOTES_FIXED") == "1" else body.count("\n")
    return round(len(body.split()) / lines, 2)


def health(request: HttpRequest) -> HttpResponse:
    """``ok``; a signed-in user also sees the words per line of their latest note's title
    (so a signed-in ``GET /`` fails as the summary does)."""
    if not request.user.is_authenticated:
        return HttpResponse("ok")
    latest = Note.objects.filter(owner=request.user).order_by("-id").first()
    if latest is None:
        return HttpResponse("ok, no notes yet")
    return HttpResponse(f"ok, latest: {words_per_line(latest.title)} words per line")


@login_required
def new_note(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = NoteForm(request.POST)
        if form.is_valid():
            note = form.save(commit=False)
            note.owner = request.user
            note.save()
            messages.success(request, f"Saved, {words_per_line(note.body)} words per line")
            return redirect("new-note")
    else:
        form = NoteForm()
    return render(request, "notes/new.html", {"form": form})


@login_required
def summary(request: HttpRequest, pk: int) -> HttpResponse:
    if request.method == "POST":
        posted = request.POST["kind"]  # the type's id, or its natural key "app_label.model"
        kind = (
            ContentType.objects.get_by_natural_key(*posted.split(".", 1))
            if "." in posted
            else ContentType.objects.get_for_id(int(posted))
        )
        if os.environ.get("NOTES_SUMMARY_COUNT") == "1":
            Note.objects.filter(owner=request.user).count()
        note = kind.get_object_for_this_type(pk=pk, owner=request.user)
        return HttpResponse(f"{note.title}: {words_per_line(note.title)} words per line")
    kind = ContentType.objects.get_for_model(Note)
    return render(request, "notes/summary.html", {"kind": kind, "pk": pk})


class NoteSerializer(serializers.ModelSerializer):
    class Meta:
        model = Note
        fields = ("id", "title", "body")


class NoteList(APIView):
    def post(self, request: Request) -> Response:
        serializer = NoteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        note = serializer.save(owner=request.user)
        return Response({**serializer.data, "wordsPerLine": words_per_line(note.body)}, 201)
