"""A Flask notes site as the Flask, Flask-Login and Flask-WTF tutorials write one.

No reproit-otel code. Users sign in with a form (Flask-Login keeps them in Flask's signed
session cookie), every POST is CSRF-protected by Flask-WTF (forms carry the hidden
``csrf_token`` field, JSON calls the ``X-CSRFToken`` header), notes live in PostgreSQL through
Flask-SQLAlchemy. The planted bug: the words-per-line summary of a note divides by the number
of line breaks, so a one-line note answers 500 after it was saved. ``NOTES_FIXED=1`` is the
fix.

Environment: ``DATABASE_URL`` (PostgreSQL), ``NOTES_SECRET_KEY`` (the production key),
``NOTES_FIXED``, ``NOTES_SESSION_PROTECTION`` (Flask-Login's ``SESSION_PROTECTION``: ``basic``
by default, ``strong`` logs out a session presented from another client address).
``python app.py init USER PASSWORD`` creates the tables and the user; ``gunicorn app:app``
serves it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from flask import Flask, flash, jsonify, redirect, render_template_string, request, url_for
from flask_login import LoginManager, UserMixin, current_user, login_required, login_user
from flask_sqlalchemy import SQLAlchemy
from flask_wtf import FlaskForm
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import ForeignKey, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column
from werkzeug.security import check_password_hash, generate_password_hash
from wtforms import PasswordField, StringField, TextAreaField
from wtforms.validators import DataRequired

_dsn = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:9/postgres")

app = Flask(__name__)
app.config["SECRET_KEY"] = os.environ.get("NOTES_SECRET_KEY", "dev")
app.config["SESSION_PROTECTION"] = os.environ.get("NOTES_SESSION_PROTECTION", "basic")
app.config["SQLALCHEMY_DATABASE_URI"] = "postgresql+psycopg2://" + _dsn.removeprefix(
    "postgresql://"
)
db = SQLAlchemy(app)
csrf = CSRFProtect(app)
login_manager = LoginManager(app)
login_manager.login_view = "login"


class User(UserMixin, db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(80), unique=True)
    password_hash: Mapped[str] = mapped_column(String(256))


class Note(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("user.id"))
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    return db.session.get(User, int(user_id))


class LoginForm(FlaskForm):
    username = StringField("Username", validators=[DataRequired()])
    password = PasswordField("Password", validators=[DataRequired()])


class NoteForm(FlaskForm):
    title = StringField("Title", validators=[DataRequired()])
    body = TextAreaField("Body", validators=[DataRequired()])


PAGE = """<!doctype html>
<meta name="csrf-token" content="{{ csrf_token() }}">
<form method="post">
  {{ form.hidden_tag() }}
  {% for field in form if field.name != "csrf_token" %}{{ field.label }} {{ field() }}{% endfor %}
  <button>Send</button>
</form>
"""


def words_per_line(body: str) -> float:
    lines = body.count("\n") + 1 if os.environ.get("NOTES_FIXED") == "1" else body.count("\n")
    return round(len(body.split()) / lines, 2)


@app.get("/")
def index() -> str:
    return "ok"


@app.route("/login", methods=["GET", "POST"])
def login() -> Any:
    form = LoginForm()
    if form.validate_on_submit():
        user = db.session.scalar(select(User).where(User.username == form.username.data))
        if user is None or not check_password_hash(user.password_hash, form.password.data or ""):
            flash("Invalid username or password")
            return redirect(url_for("login"))
        login_user(user)
        return redirect(url_for("new_note"))
    return render_template_string(PAGE, form=form)


@app.get("/notes/new")
@login_required
def new_note() -> str:
    return render_template_string(PAGE, form=NoteForm())


@app.post("/notes")
@login_required
def add_note() -> Any:
    form = NoteForm()
    if not form.validate_on_submit():
        return render_template_string(PAGE, form=form)
    note = Note(user_id=current_user.id, title=form.title.data, body=form.body.data)
    db.session.add(note)
    db.session.commit()
    flash(f"Saved, {words_per_line(note.body)} words per line")
    return redirect(url_for("new_note"))


@app.post("/api/notes")
@login_required
def add_note_json() -> Any:
    fields = request.get_json()
    note = Note(user_id=current_user.id, title=fields["title"], body=fields["body"])
    db.session.add(note)
    db.session.commit()
    return jsonify(id=note.id, wordsPerLine=words_per_line(note.body)), 201


if __name__ == "__main__" and sys.argv[1:2] == ["init"]:
    username, password = sys.argv[2:4]
    with app.app_context():
        db.create_all()
        db.session.add(User(username=username, password_hash=generate_password_hash(password)))
        db.session.commit()
