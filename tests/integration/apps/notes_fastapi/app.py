"""A FastAPI notes API with PyJWT bearer tokens, as FastAPI's security tutorial writes one.

No reproit-otel code. ``POST /token`` checks the password and answers a signed JWT
(``HS256``, ``sub`` = the user name, 30 minutes); every other route reads it through
``OAuth2PasswordBearer`` and ``jwt.decode`` with the secret key and loads the user from
PostgreSQL (SQLAlchemy on psycopg2). The planted bug: the words-per-line summary divides by
the number of line breaks, so a one-line note answers 500 after it was saved.
``NOTES_FIXED=1`` is the fix.

``NOTES_JWT=jose`` makes the tokens with python-jose instead, as FastAPI's tutorial did
before it moved to PyJWT (``from jose import JWTError, jwt``; the same calls).

``NOTES_KEY_ID=1`` names the key in the token's header (``kid``) and reads that header
before the token is verified to choose the key, as services that rotate keys and
Flask-JWT-Extended do (``jwt.get_unverified_header``).

Environment: ``DATABASE_URL``, ``NOTES_SECRET_KEY``, ``NOTES_FIXED``, ``NOTES_JWT``,
``NOTES_KEY_ID``.
``python app.py init USER PASSWORD`` creates the tables and the user;
``uvicorn app:app`` serves it.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Iterator
from typing import Annotated, Any

if os.environ.get("NOTES_JWT") == "jose":
    from jose import JWTError as InvalidTokenError
    from jose import jwt
else:
    import jwt
    from jwt import InvalidTokenError
from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.responses import PlainTextResponse
from fastapi.security import OAuth2PasswordBearer
from pydantic import BaseModel
from sqlalchemy import ForeignKey, String, Text, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from werkzeug.security import check_password_hash, generate_password_hash

SECRET_KEY = os.environ.get("NOTES_SECRET_KEY", "dev-key-of-at-least-thirty-two-bytes!")
ALGORITHM = "HS256"
KEY_ID = "current" if os.environ.get("NOTES_KEY_ID") == "1" else None
KEYS = {"current": SECRET_KEY}
_dsn = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:9/postgres")
engine = create_engine("postgresql+psycopg2://" + _dsn.removeprefix("postgresql://"))
app = FastAPI()
oauth2_scheme = OAuth2PasswordBearer(tokenUrl="token")


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(80), unique=True)
    hashed_password: Mapped[str] = mapped_column(String(256))


class Note(Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)


def get_session() -> Iterator[Session]:
    with Session(engine) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


class Login(BaseModel):
    username: str
    password: str


class NoteIn(BaseModel):
    title: str
    body: str


def get_current_user(token: Annotated[str, Depends(oauth2_scheme)], session: SessionDep) -> User:
    refused = HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED,
        detail="Could not validate credentials",
        headers={"WWW-Authenticate": "Bearer"},
    )
    try:
        key = SECRET_KEY
        if KEY_ID is not None:
            key = KEYS.get(jwt.get_unverified_header(token).get("kid"), "")
            if not key:
                raise refused
        payload = jwt.decode(token, key, algorithms=[ALGORITHM])
    except InvalidTokenError:
        raise refused from None
    user = session.scalar(select(User).where(User.username == payload.get("sub")))
    if user is None:
        raise refused
    return user


def words_per_line(body: str) -> float:
    lines = body.count("\n") + 1 if os.environ.get("NOTES_FIXED") == "1" else body.count("\n")
    return round(len(body.split()) / lines, 2)


@app.get("/", response_class=PlainTextResponse)
def health() -> str:
    return "ok"


@app.post("/token")
def login(form: Login, session: SessionDep) -> dict[str, str]:
    user = session.scalar(select(User).where(User.username == form.username))
    if user is None or not check_password_hash(user.hashed_password, form.password):
        raise HTTPException(status_code=400, detail="Incorrect username or password")
    expire = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=30)
    headers = {"kid": KEY_ID} if KEY_ID is not None else None
    claims = {"sub": user.username, "exp": expire}
    token = jwt.encode(claims, SECRET_KEY, algorithm=ALGORITHM, headers=headers)
    return {"access_token": token, "token_type": "bearer"}


@app.post("/notes", status_code=201)
def add_note(
    note: NoteIn, user: Annotated[User, Depends(get_current_user)], session: SessionDep
) -> dict[str, Any]:
    row = Note(user_id=user.id, title=note.title, body=note.body)
    session.add(row)
    session.commit()
    return {"id": row.id, "owner": user.username, "wordsPerLine": words_per_line(row.body)}


if __name__ == "__main__" and sys.argv[1:2] == ["init"]:
    username, password = sys.argv[2:4]
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(User(username=username, hashed_password=generate_password_hash(password)))
        session.commit()
