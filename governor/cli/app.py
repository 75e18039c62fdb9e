"""What every ``governor`` subcommand shares: the App (where Redis is, which
governor, one client), the global options, ``--json``, and the one place
library errors become a clear line on stderr and an exit status."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click
import redis

from .._sync.governor import Governor
from ..config import GovernorConfig
from ..core import Status
from ..errors import ConfigError, GovernorError, GovernorNotFound, GovernorUnavailable
from ..protocol import GovernorKeys, governor_keys

DEFAULT_URL = "redis://localhost:6379/0"
F = TypeVar("F", bound=Callable[..., Any])


def safe_url(url: str) -> str:
    """The URL with any password replaced by ***."""
    return re.sub(r"(//[^:@/]*:)[^@/]*@", r"\1***@", url)


@dataclasses.dataclass
class App:
    """What every subcommand needs: where Redis is, which governor, one client."""

    url: str
    name: str | None
    prefix: str
    timeout: float
    json: bool = False
    _client: Any = None

    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = redis.Redis.from_url(
                    self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
                )
            except ValueError as error:
                raise click.UsageError(f"invalid Redis URL {safe_url(self.url)!r}: {error}") from error
        return self._client

    def config(self) -> GovernorConfig:
        return GovernorConfig(key_prefix=self.prefix, redis_timeout=self.timeout)

    def require_name(self) -> str:
        if not self.name:
            raise click.UsageError("which governor? Pass --name NAME or set GOVERNOR_NAME")
        try:
            governor_keys(self.name, self.prefix)
        except ConfigError as error:
            raise click.BadParameter(str(error), param_hint="'--name' / '--prefix'") from error
        return self.name

    def governor(self, name: str | None = None, config: GovernorConfig | None = None) -> Governor:
        return Governor(self.client(), name or self.require_name(), config or self.config())

    def keys(self) -> GovernorKeys:
        return governor_keys(self.require_name(), self.prefix)

    def existing(self) -> tuple[Governor, Status]:
        """The named governor and its status; GovernorNotFound if it does not exist."""
        gov = self.governor()
        return gov, gov.status(create=False)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def fail(message: str) -> NoReturn:
    raise click.ClickException(message)


@contextmanager
def clear_errors(app: App | None) -> Iterator[None]:
    """Library errors as one clear line on stderr, never a traceback: an
    invalid value (ConfigError) is a usage error (exit status 2), anything
    else a runtime failure (exit status 1)."""
    try:
        yield
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    except GovernorNotFound as error:
        fail(f"{error}. `governor list` shows the governors at {safe_url(app.url) if app else 'this URL'}.")
    except GovernorUnavailable as error:
        fail(f"{error} (url: {safe_url(app.url) if app else '?'})")
    except GovernorError as error:
        fail(str(error))


class Command(click.Command):
    """An operator command: the governor name is checked first, errors are made clear."""

    def invoke(self, ctx: click.Context) -> Any:
        app = ctx.find_object(App)
        if app is not None and app.name is not None:
            app.require_name()  # an invalid name is a usage error of every command, before anything runs
        with clear_errors(app):
            return super().invoke(ctx)


def command(name: str | None = None) -> Callable[[Callable[..., Any]], click.Command]:
    """Declare an operator command (added to the group by governor/cli/__init__.py)."""
    return click.command(name, cls=Command)


pass_app = click.make_pass_decorator(App)


def _with_global_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    app = ctx.find_object(App)
    return bool(value or (app is not None and app.json))


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_with_global_json, help="Print JSON instead of text."
)


def _global_setter(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """An option callback that puts a global option given after the command into the App."""

    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        app = ctx.find_object(App)
        if app is not None and value is not None:
            setattr(app, field, value)

    return store


def global_options(*, name: bool = True) -> Callable[[F], F]:
    """The group's options, accepted after the command too (``governor status -n x``);
    given there, they win over the ones before the command and the environment."""

    def decorate(f: F) -> F:
        options = [
            click.option("--url", metavar="URL", expose_value=False, callback=_global_setter("url"),
                         help="Redis URL (also before the command; env GOVERNOR_REDIS_URL)."),
            click.option("--prefix", metavar="PREFIX", expose_value=False, callback=_global_setter("prefix"),
                         help="Key prefix (also before the command; env GOVERNOR_PREFIX)."),
            click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                         expose_value=False, callback=_global_setter("timeout"),
                         help="Seconds before an unanswered Redis call fails (also before the command)."),
        ]  # fmt: skip
        if name:
            options.insert(
                1,
                click.option("--name", "-n", metavar="NAME", expose_value=False, callback=_global_setter("name"),
                             help="The governor (also before the command; env GOVERNOR_NAME)."),
            )  # fmt: skip
        for option in reversed(options):
            f = option(f)
        return f

    return decorate
