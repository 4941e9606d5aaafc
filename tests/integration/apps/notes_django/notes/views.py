"""A signed-in user's notes: a CSRF-protected form (session login) and a DRF API (token).

The planted bug: the words-per-line summary divides by the number of line breaks, so a
one-line note answers 500 after it was saved. ``NOTES_FIXED=1`` is the fix.
"""

from __future__ import annotations

import os

from django.contrib import messages
from django.contrib.auth.decorators import login_required
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
    return HttpResponse("ok")


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
