"""Reporter: the app-facing client. Perturb at once, queue durably, upload in the background.

    with Reporter("https://telemetry.example.com", queue_path=data_dir / "deniable.db") as r:
        r.report("feature_x_enabled", True)   # perturbed here; True never leaves this call
        r.report("os", "android")             # categorical: one of the declared categories
        r.report("crashes", 3)                # histogram: a number, put in its bucket
        r.report("startup_ms", 812.5)         # numeric: a number in the declared range
        r.report("dark_mode", True, dims={"platform": "ios"})  # public dimensions, in clear

The true value is checked (``MetricSpec.encode``) and used once, inside ``_perturb`` (one
path for every kind: the kind picks the privacy layer's rule); only the perturbed payload (a
bit, a category index or an OUE bitset) is queued, stored, logged or sent. Neither ``Reporter()`` nor
``report()`` ever waits on the network: ``report()`` costs a few microseconds (group commit)
and returns. A committer thread writes reports to SQLite, a sender thread uploads sealed
batches, and a catalogue thread fetches ``GET /v1/metrics`` (see ``deniable.client.queue``,
``.sender`` and ``.catalogue``, and docs/client.md for the guarantees and the table of network
conditions).

Public dimensions (``deniable.client.dimensions``: app version, platform, ...) are NOT
protected by local differential privacy: they travel in clear, from the closed allow-lists
each metric declares (the app's lists: a served list is never followed).
``Reporter(dimensions=...)`` sets device-wide values, attached to the
reports of every metric that declares that dimension; ``report(..., dims=...)`` overrides them
per call. They are checked at the call (``other`` applied where declared), before any privacy
budget is spent.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any, Unpack

from deniable.client.errors import (
    BudgetExceededError,
    DeniableError,
    InvalidParameterError,
    MetricCapError,
    QueueError,
    UnknownMetricError,
)
from deniable.client.config import (
    DEFAULT_CONNECTION,
    DEFAULT_DELIVERY,
    DEFAULT_PRIVACY,
    DEFAULT_STORAGE,
    Connection,
    Delivery,
    LegacyOptions,
    Options,
    Privacy,
    Storage,
    merge_legacy,
)
from deniable.client.catalogue import CatalogueFetcher
from deniable.client.dimensions import (
    DIMENSION_NAME, NONE, DimensionError, Dimensions, check_stated)
from deniable.client.kinds import Mechanism, MetricSpec, payload
from deniable.client.longitudinal import LongitudinalGuard, PrivacyLoss
from deniable.client.mechanism import RandomizedResponse
from deniable.client.metrics import (
    AllDimensions,
    AllPolicies,
    Catalogue,
    Declared,
    Resolution,
    Served,
    above_ceiling,
    check_max_epsilon,
    coerce_catalogue,
    load_metrics_file,
    lookup,
    resolve,
)
from deniable.client.period import (
    DEFAULT_POLICY, CollectionPolicy, PeriodGate, follow_policies)
from deniable.client.queue import (
    DurableQueue,
    dims_text,
)
from deniable.client.randomness import RandomBits
from deniable.client.sender import (
    Sender,
)
from deniable.client.state import IN_MEMORY, StateDir, default_state_dir, origin_namespace
from deniable.client.stats import DeadLetter, LedgerEntry, Stats
from deniable.client.transport import Transport, Verify
from deniable.client.wire import is_metric_name

log = logging.getLogger("deniable.client")

_CATALOGUE_META = "catalogue"
_PERIODS_FILE = "periods.json"
"""The PeriodGate's file in the privacy directory (deniable.client.period), erased with it."""
_SEEN_DIMS = 1024
"""Per-call dims combinations whose queued text each metric remembers."""
_VALUE_TYPES = (bool, int, float, Fraction, str)
"""What some kind's ``report()`` takes: bool, number, or category label."""

# Every open Reporter, for the atexit flush and for restarting threads after a fork.
_OPEN: weakref.WeakSet[Reporter] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


class _DimensionRoute:
    """How one metric's reports get their public dimensions: the metric's ``Dimensions``,
    the device-wide values it declares (as given), and their queued text, or why they are
    refused (``error``, naming ``field``)."""

    __slots__ = ("dimensions", "device", "text", "error", "field", "seen")

    def __init__(self, metric: str, dimensions: Dimensions,
                 device: Mapping[str, str]) -> None:
        self.dimensions = dimensions
        self.device = {name: value for name, value in device.items()
                       if dimensions.get(name) is not None}
        self.text = ""
        self.error: str | None = None
        self.field = ""
        self.seen: dict[tuple[tuple[str, str], ...], str] = {}
        """Per-call dims (as given) -> their queued text: values come from short lists."""
        try:
            self.text = dims_text(dimensions.normalize(self.device))
        except DimensionError as exc:
            self.field = exc.field
            self.error = (f"metric {metric!r}: the device-wide value of dimension "
                          f"{exc.field!r} (Reporter(dimensions=...)) is refused: {exc}; "
                          f"give a listed value with report(..., dims={{{exc.field!r}: ...}}) "
                          f"or fix Reporter(dimensions=...). Nothing was reported.")


class Reporter:
    """Reports telemetry under local differential privacy, durably and exactly once: boolean
    metrics under randomized response, categorical and histogram metrics under k-ary
    randomized response or optimized unary encoding, numeric metrics under 1BitMean.

    Construction never waits on the network. **The app's declaration is the privacy
    contract**: only the ``metrics`` the app declares are reported, each under its declared
    kind, domain, ε ceiling, memoization, period and public dimensions, from the first
    ``report()`` on (no catalogue needed). The collector's catalogue, fetched (and refreshed
    every ``Delivery.catalogue_refresh`` seconds) on a background thread and cached in the queue file,
    may only move a declared metric to another registered version of the same question with
    an ε no larger; whatever else it states is ignored, counted in ``stats().ignored_served``
    and warned about once per metric (docs/client.md, "The declaration is the contract").

    Args:
        collector_url: the collector's base URL.
        metrics: the metrics the app declares: name -> ``MetricSpec``, mechanism, mechanism
            id (boolean ``rr:`` or numeric ``bm:``) or declaration table (as in the metrics
            file: ``kind``, ``categories``, ``edges``, ``lower``/``upper``, ``clamp``,
            ``mechanism`` or ``epsilon``); or the path of the collector's metrics TOML file.
            A table may also state the metric's ``memoization``, ``instantaneous`` and
            ``period`` (memoized, daily by default) and its public ``dimensions`` and
            ``combinations``. A declared mechanism is a privacy floor: a mechanism the
            collector registers with a larger epsilon is never used. If omitted, nothing is
            declared and nothing is reported: ``report()`` raises UnknownMetricError for
            every metric (the served catalogue never adds a metric).
        token: an ingest key, if the collector requires one (``set_token`` replaces it).
        queue_path: the SQLite queue file, e.g. in the app's private data directory. None
            (the default) keeps the queue in memory: fast, but a crash loses what is queued.
        storage: ``Storage``: the privacy state's directory, durability, queue limits.
        delivery: ``Delivery``: batching, retries and backoff, catalogue refresh, how long
            ``close()`` and the exit hook wait.
        privacy: ``Privacy``: the epsilon ceiling, budgets, per-metric caps, collection
            policies, fresh coins, instantaneous layers, one report per period.
        connection: ``Connection``: timeouts and TLS verification.
        dimensions: device-wide public dimension values, e.g. ``{"app_version": "2.4",
            "platform": "android"}``: attached, in clear (NOT protected by local DP), to
            each report of a metric that declares that dimension, and to no other. A value
            a metric's allow-list refuses (and that it does not count as ``other``) makes
            that metric's ``report()`` raise InvalidParameterError, unless the call gives
            its own value; a warning says so once (``stats().dimension_problems``).
        enabled: the user's consent, as the app keeps it: False is ``set_enabled(False)``
            from the start (nothing is collected, no privacy state is created, and what an
            earlier run left is deleted). See ``set_enabled``.
        rng: the random-bit source; the secure system source unless a test injects one.
        **legacy: the 25 keyword arguments the four objects replace (``batch_size=``,
            ``max_epsilon=``, ...): deprecated, kept for one release. Each warns
            (``DeprecationWarning``) and overrides the same field of its object
            (``deniable.client.config.LEGACY_KEYWORDS``).

    Every field of the four objects is documented in ``deniable.client.config`` and
    docs/client.md, "Configuration". ``reporter.storage``, ``.delivery``, ``.privacy`` and
    ``.connection`` are the objects in use (deprecated keywords applied).

    Raises:
        InvalidParameterError: an option out of range, an invalid declared catalogue, a
            declared mechanism above ``Privacy.max_epsilon``, or ``dimensions`` that are not a
            mapping of dimension names to str values.
        QueueError: the queue file cannot be opened.
        TypeError: a keyword argument ``Reporter`` does not take.
    """

    def __init__(self, collector_url: str,
                 metrics: Declared | str | os.PathLike[str] | None = None, *,
                 token: str | None = None,
                 queue_path: str | os.PathLike[str] | None = None,
                 storage: Storage = DEFAULT_STORAGE,
                 delivery: Delivery = DEFAULT_DELIVERY,
                 privacy: Privacy = DEFAULT_PRIVACY,
                 connection: Connection = DEFAULT_CONNECTION,
                 dimensions: Mapping[str, str] | None = None,
                 enabled: bool = True,
                 rng: RandomBits | None = None,
                 **legacy: Unpack[LegacyOptions]) -> None:
        options = merge_legacy(Options(storage, delivery, privacy, connection), legacy)
        storage, delivery, privacy = options.storage, options.delivery, options.privacy
        connection = options.connection
        self.storage, self.delivery, self.privacy = storage, delivery, privacy
        self.connection = connection
        self.collector_url = collector_url
        self.batch_size = delivery.batch_size
        self.close_timeout = delivery.close_timeout
        self.exit_timeout = delivery.exit_timeout
        self.max_epsilon = check_max_epsilon(privacy.max_epsilon)
        self._rng = rng
        self._timeout = connection.timeout
        self._token = token
        self._verify = _check_verify(connection.verify,
                                     connection.insecure_skip_verify)
        self._declared_skipped: dict[str, str] = {}  # declared tables of unknown kinds
        self._device_dims = _check_device_dimensions(dimensions)
        self._declared_dims: AllDimensions = {}
        declared_policies: AllPolicies = {}
        self._declared = _declared_catalogue(metrics, self.max_epsilon, self._declared_skipped,
                                             self._declared_dims, declared_policies)
        # Each declared metric's policy: its table's, or the app's policies=, else the default.
        self._policies: dict[str, CollectionPolicy] = {
            **declared_policies, **privacy.policies}
        self._queue = DurableQueue(queue_path, durability=storage.durability,
                                   batch_size=delivery.batch_size,
                                   commit_interval=storage.commit_interval,
                                   max_batch_age=delivery.max_batch_age,
                                   max_queued_reports=storage.max_queued_reports,
                                   max_queue_age=storage.max_queue_age, on_sealed=self._on_sealed)
        try:
            self._sender_options: dict[str, Any] = dict(
                backoff=delivery.backoff, max_backoff=delivery.max_backoff,
                max_config_backoff=delivery.max_config_backoff,
                upload_jitter=delivery.upload_jitter)
            self._fetcher_options: dict[str, Any] = dict(
                refresh=delivery.catalogue_refresh, backoff=delivery.backoff,
                max_backoff=delivery.max_backoff, max_config_backoff=delivery.max_config_backoff)
            self._sender = Sender(self._queue, self._new_transport, **self._sender_options)
            self._fetcher = CatalogueFetcher(self._new_transport, self._on_catalogue_document,
                                             **self._fetcher_options)
            privacy_dir = storage.privacy_dir
            if privacy_dir is None:
                privacy_dir = (f"{os.fspath(queue_path)}.privacy" if queue_path is not None
                               else default_state_dir(origin_namespace(collector_url)))
            self._privacy_dir = privacy_dir
            self._one_per_period = privacy.one_per_period
            self._periods = self._new_periods()
            # fresh= and irr= name metrics; the others follow their declared memoization.
            all_fresh, all_irr = follow_policies(self._declared, self._policies,
                                                 privacy.fresh, dict(privacy.irr))
            self._guard_options: dict[str, Any] = dict(
                budgets=privacy.budgets, fresh=all_fresh, rng=rng,
                max_metric_epsilon=privacy.max_metric_epsilon,
                irr={name: (layer if isinstance(layer, RandomizedResponse)
                            else RandomizedResponse.from_id(layer))
                     for name, layer in all_irr.items()})
            # Built without consent, it reports nothing: no state is created on disk.
            self._guard = (LongitudinalGuard(privacy_dir, **self._guard_options) if enabled
                           else LongitudinalGuard(IN_MEMORY, warn_in_memory=False,
                                                  **self._guard_options))
            self._guard.check(self._declared)  # a programming error: raise it now
            for name in self._declared:  # the policy each declared metric follows, in full
                self._policies[name] = self._guard.policy(name, self._policy(name).period)
        except BaseException:
            self._queue.close()
            raise
        # What report() routes by; replaced whole (never mutated) when the catalogue changes.
        self._resolution = Resolution(usable={})
        # name -> (mechanism, its id, None for a boolean metric else its spec, its dimension
        # route or None if it declares no dimensions).
        self._entries: dict[str, tuple[Mechanism, str, MetricSpec,
                                       _DimensionRoute | None]] = {}
        self._specs: Catalogue = {}
        self._dimensions: AllDimensions = {}
        self._dimension_problems: dict[str, str] = {}
        self._noted: set[str] = set()           # log lines already written once
        self._apply(self._resolve(self._cached_catalogue()))
        self._put = self._queue.put_sync if storage.durability == "sync" else self._queue.put
        self._closed = False
        self._close_lock = threading.Lock()
        self._last_stats: Stats | None = None  # taken by close(), served by stats() after
        self._enabled = True
        self._consent_lock = threading.Lock()
        self._queue.start()
        self._sender.start()
        self._fetcher.start()
        with _OPEN_LOCK:
            _OPEN.add(self)
        if not enabled:
            self.set_enabled(False)

    # -- configuration ---------------------------------------------------------------------

    @property
    def metrics(self) -> dict[str, Mechanism]:
        """The metrics this reporter reports now: name -> the mechanism used (a copy)."""
        return {name: entry[0] for name, entry in self._entries.items()}

    @property
    def specs(self) -> Catalogue:
        """The metrics this reporter reports now: name -> its ``MetricSpec`` (kind,
        mechanism, categories, edges, bounds), a copy."""
        return dict(self._specs)

    @property
    def dimensions(self) -> AllDimensions:
        """The public dimensions each metric reported now declares: name -> ``Dimensions``
        (metrics that declare none are absent), a copy. Always the app's declaration: a
        served list, wider or not, changes nothing on the device."""
        return dict(self._dimensions)

    @property
    def ready(self) -> bool:
        """Always True: declared metrics are reported from construction on, without a
        catalogue. Kept for apps written against older versions."""
        return True

    @property
    def catalogue_fetched(self) -> bool:
        """Whether the collector's catalogue was fetched by this reporter (not only cached)."""
        return self._fetcher.fetched

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Return True at once: declared metrics need no catalogue (``catalogue_fetched``
        says whether one was fetched). Kept for apps written against older versions."""
        return True

    def set_token(self, token: str | None) -> None:
        """Use another ingest key from now on, e.g. after the old one was revoked.

        Queued batches keep their batch ids, so those the collector already counted are not
        counted again. Uploads and the catalogue fetch are retried at once.
        """
        self._token = token
        self._sender.new_transport()
        self._fetcher.fetch_soon()

    def _new_transport(self) -> Transport:
        return Transport(self.collector_url, timeout=self._timeout, retries=0,
                         token=self._token, verify=self._verify)

    def _cached_catalogue(self) -> Served | None:
        cached = self._queue.get_meta(_CATALOGUE_META)
        if cached is None:
            return None
        try:
            return Served.parse(json.loads(cached), {})
        except (ValueError, DeniableError) as exc:
            log.warning("deniable: ignoring the cached catalogue (%s)", exc)
            return None

    def _on_catalogue_document(self, document: Any) -> None:
        """A fetched catalogue (on the catalogue thread): parse, cache, apply."""
        served = Served.parse(document, {})  # raises if malformed: retried later
        if not self._queue.closed:
            self._queue.set_meta(_CATALOGUE_META, json.dumps(document))
        self._retry_accepted_refusals(served)  # before _apply: its ready event ends waits
        self._apply(self._resolve(served))

    def _resolve(self, served: Served | None) -> Resolution:
        """Each declared metric's spec, with what the served catalogue says ignored."""
        return resolve(self._declared, served, self.max_epsilon, policies=self._policies,
                       dimensions=self._declared_dims)

    def _retry_accepted_refusals(self, served: Served) -> None:
        """Send again the refused reports of each metric whose mechanism the collector now
        serves (e.g. the operator registered the app's declared one): at most once per
        catalogue fetch, in new batches."""
        for metric, mechanisms in self._queue.refused_mechanisms().items():
            spec = served.specs.get(metric)
            if spec is not None and spec.mechanism.id in mechanisms:
                n = self._queue.retry_refused(metric)
                log.info("deniable: the collector now serves %r's mechanism; %d refused "
                         "reports sent again", metric, n)

    def _apply(self, resolution: Resolution) -> None:
        """Route reports by ``resolution``: build each metric's layers, note what changed."""
        for name, spec in list(resolution.usable.items()):
            try:
                self._guard.layers(name, spec.mechanism)
            except InvalidParameterError as exc:  # e.g. an irr layer this mechanism defeats
                del resolution.usable[name]
                resolution.withheld[name] = str(exc)
        # Declared tables of kinds this client does not know: withheld, said once, counted.
        for name, why in self._declared_skipped.items():
            if name not in resolution.usable:
                resolution.withheld.setdefault(name, why)
        for name, why in resolution.withheld.items():
            self._note(f"deniable: metric {name!r} is withheld: {why}")
        for name, why in resolution.floored.items():
            self._note(f"deniable: privacy floor for metric {name!r}: {why}")
        for name, parts in resolution.ignored.items():
            self._note(f"deniable: metric {name!r}: the collector's catalogue states another "
                       f"{', '.join(parts)} than the app declares; ignored (the declaration "
                       f"is the contract, docs/client.md)", key=f"ignored:{name}")
        routes = self._dimension_routes(resolution.usable)
        self._dimension_problems = {name: route.error for name, route in routes.items()
                                    if route.error is not None}
        for why in self._dimension_problems.values():
            self._note(f"deniable: {why}")
        self._dimensions = {name: route.dimensions for name, route in routes.items()}
        self._specs = dict(resolution.usable)
        self._entries = {name: (spec.mechanism, spec.mechanism.id, spec, routes.get(name))
                         for name, spec in resolution.usable.items()}
        self._resolution = resolution

    def _dimension_routes(self, usable: Catalogue) -> dict[str, _DimensionRoute]:
        """Each usable metric's dimension route (metrics that declare none are absent): the
        app's declaration only. A served list is never followed, so widening it on the
        collector changes nothing a device sends."""
        routes = {}
        for name in usable:
            declared = self._declared_dims.get(name, NONE)
            if declared:
                routes[name] = _DimensionRoute(name, declared, self._device_dims)
        return routes

    def _note(self, line: str, key: str | None = None) -> None:
        """Log ``line`` as a warning, once per reporter (per ``key`` if given, else per
        line)."""
        key = line if key is None else key
        if key not in self._noted:
            self._noted.add(key)
            log.warning("%s", line)

    # -- reporting -------------------------------------------------------------------------

    def report(self, metric: str, true_value: object,
               dims: Mapping[str, str] | None = None) -> None:
        """Perturb ``true_value`` for ``metric`` and queue the perturbed report.

        ``true_value`` is what the metric's kind takes: a bool (boolean), one of the declared
        category labels (categorical), a number put in its bucket (histogram) or a number in
        [lower, upper] (numeric); ints, floats and Fractions are read exactly. Numbers out of
        range are clamped only if the metric declares ``clamp``.

        ``dims`` gives public dimension values for this report (e.g. ``{"platform":
        "ios"}``), over the device-wide ``Reporter(dimensions=...)``; only dimensions the
        metric declares are attached. They travel in clear: they are NOT protected by local
        differential privacy. A value off the list counts as ``other`` where the dimension
        declares it.

        Does nothing at all while collection is off (``set_enabled(False)``).

        Never touches the network and never waits for a catalogue. In ``"sync"`` durability,
        returns once the report is committed to the queue file. For a withheld metric (of a
        kind this client does not know, or whose memoized answer would single the device out)
        the report is dropped and counted in ``stats().withheld``: nothing of it is kept. A
        report that needs a new memoized answer for a metric past its cap over versions
        (``max_metric_epsilon``) is sent as an answer already paid for (the nearest paid
        number or bucket, else the lowest paid category or the other boolean value: a rule
        that never reads the value), or, while none is paid, not queued (for every value);
        either way it returns normally and is counted in ``stats().cap_refused`` (a warning
        said why, once). A budget's refusal is substituted alike; only while nothing is paid
        does it raise.

        Raises:
            UnknownMetricError: a metric the app did not declare (``metrics=``), whatever the
                collector serves; it depends on the name only, never on the value. Nothing
                is queued or charged.
            InvalidParameterError: ``true_value`` is not what the metric takes: not a bool (or
                0/1); an unknown category; NaN, an infinity, a number out of range (without
                ``clamp``) or not a number. The message never shows the value; nothing is
                queued or charged.
            DimensionError: (an InvalidParameterError) a dimension the metric does not
                declare, a value that is not a str, or a value off its list (without
                ``other``), per call or device-wide; ``field`` names the dimension. Nothing
                is queued or charged.
            BudgetExceededError: the privacy budget refused the report and no answer of
                the metric is paid for to send in its place (counted in
                ``stats().budget_refused``; nothing was queued).
            QueueError: the reporter is closed, or (sync) the report could not be committed.
        """
        if not self._enabled:
            return  # collection is off (set_enabled): nothing is checked, kept or counted
        entry = self._entries.get(metric)
        if entry is None:  # undeclared (raises), or withheld: its kind is unknown here
            self._not_routed(metric)
            if not isinstance(true_value, _VALUE_TYPES):
                raise InvalidParameterError(
                    f"true_value must be a bool, a category label (str) or a number. "
                    f"Got a {type(true_value).__name__} instead.")
            if dims is not None:
                check_stated(dims)
            self._queue.count_refused("withheld")
            return
        mechanism, mechanism_id, spec, route = entry
        # Public dimensions first: a refused one spends nothing (no period, no budget).
        stated = "" if route is None and not dims else _stated_dims(metric, route, dims)
        encoded = _encode(metric, spec, true_value)  # refused here: nothing kept or charged
        if self._periods is not None and not self._periods.admit(metric,
                                                                 self._policy(metric)):
            return  # one report per period: this period's is already queued
        try:
            answer = self._perturb(metric, spec, encoded)
        except MetricCapError:
            return  # counted in the privacy state (stats().cap_refused); the ledger warned
        except BudgetExceededError:
            if self._periods is not None:
                self._periods.release(metric, self._policy(metric))
            self._queue.count_budget_refused()
            raise
        self._put((metric, mechanism_id, payload(mechanism, answer), stated))

    def _not_routed(self, metric: str) -> None:
        """A report of a metric with no route: return for a withheld one (``report`` counts
        it once the value's type is checked), else raise UnknownMetricError."""
        if self._queue.closed:
            raise QueueError("the reporter is closed")
        if metric in self._resolution.withheld:
            return
        if not is_metric_name(metric):
            raise UnknownMetricError(
                f"{metric!r} is not a metric name: lowercase letters, digits and '_', at "
                f"most 64 characters")
        raise UnknownMetricError(
            f"metric {metric!r} is not declared: only the metrics the app declares "
            f"(Reporter(metrics=...)) are reported, whatever the collector serves. Declared: "
            f"{sorted(self._declared)}. Nothing was reported.")

    def _perturb(self, metric: str, spec: MetricSpec, value: bool | int | Fraction) -> int:
        """The one place a true value (already encoded: a bool, a category index or an exact
        number in range) becomes a perturbed answer: a bit, a GRR index, an OUE or SS
        bitset (an int) or a 1BitMean bit. Memoized by default (booleans per value, with the
        metric's instantaneous layer if it has one; categories per index; numbers by
        alpha-point rounding), fresh if the metric is. A refused new answer is substituted
        by the kind's rule (``Kind.substitute``). May raise ``BudgetExceededError``, which
        ``report()`` counts and lets propagate.
        """
        return spec.kind_object.answer(self._guard, metric, spec.mechanism, value)

    def _policy(self, metric: str) -> CollectionPolicy:
        return self._policies.get(metric, DEFAULT_POLICY)

    def privacy_loss(self, metric: str) -> PrivacyLoss:
        """Epsilon per report, long-run epsilon of a constant value, and what a change of
        value reveals, for ``metric`` on this device (``PrivacyLoss``), under the mechanism
        its reports follow now (``stats().floored_metrics`` says if the declared floor
        applies)."""
        spec = lookup(self.specs, metric)
        return self._guard.privacy_loss(metric, spec.mechanism)

    # -- consent -----------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether the reporter collects (``set_enabled``)."""
        return self._enabled

    def set_enabled(self, enabled: bool) -> None:
        """Turn collection on or off, e.g. when the user gives or withdraws consent.

        ``set_enabled(False)``: from then on ``report()`` does nothing (it neither checks nor
        counts), uploads and catalogue fetches stop, every queued report (pending, sealed,
        dead-lettered, refused) and every count is deleted from the queue, and the device's
        privacy state is deleted: the device secret, the privacy ledger and the periods file
        (the directory too, if nothing else is left in it). A batch already on the wire may
        still arrive. The counters on the collector hold no per-device data, so what was
        sent before cannot be picked out and deleted there (docs/client.md, "Consent").
        Calling it again erases again. A ``report()`` running in another thread at that
        moment is deleted with the rest, or raises ``PrivacyStateError``: nothing of it is
        kept or sent.

        ``set_enabled(True)``: collection starts afresh, as a new device: a new secret (new
        memoized answers), an empty ledger and no period reported yet.

        The choice is not stored: the app keeps its user's consent and passes it
        (``Reporter(enabled=...)``) at every start, in every process that reports.

        Raises:
            InvalidParameterError: ``enabled`` is not a bool.
            QueueError: the reporter is closed.
            PrivacyStateError: a state file could not be deleted.
        """
        if not isinstance(enabled, bool):
            raise InvalidParameterError(f"enabled must be a bool. Got {enabled!r} instead.")
        with self._consent_lock:
            self._check_open()
            if enabled and self._enabled:
                return
            if not enabled:
                self._enabled = False  # report() returns at once from here on
                self._fetcher.stop()
                self._sender.stop(timeout=0.0)  # an upload in flight is abandoned
                self._queue.erase(discard=True)
                if self._periods is not None:
                    self._periods.erase()
                self._guard.erase(also=(_PERIODS_FILE,))
                if self._privacy_dir != IN_MEMORY and Path(self._privacy_dir).is_dir():
                    # State an earlier run left (a Reporter built with enabled=False).
                    StateDir(self._privacy_dir).erase(also=(_PERIODS_FILE,))
                log.info("deniable: collection disabled; queued reports and the device's "
                         "privacy state deleted")
                return
            guard = LongitudinalGuard(self._privacy_dir, **self._guard_options)
            guard._fresh, guard._irr = self._guard._fresh, self._guard._irr  # noqa: SLF001
            self._guard = guard
            self._apply(self._resolution)  # the new guard's layers, under the new secret
            self._periods = self._new_periods()
            self._queue.erase(discard=False)
            self._sender = Sender(self._queue, self._new_transport, **self._sender_options)
            self._fetcher = CatalogueFetcher(self._new_transport, self._on_catalogue_document,
                                             **self._fetcher_options)
            self._sender.start()
            self._fetcher.start()
            self._enabled = True

    def _new_periods(self) -> PeriodGate | None:
        if not self._one_per_period:
            return None
        return PeriodGate(None if self._privacy_dir == IN_MEMORY else self._privacy_dir)

    # -- introspection ---------------------------------------------------------------------

    def stats(self) -> Stats:
        """Report counts (queued, sent, dropped, dead-lettered, refused, budget- and
        cap-refused, withheld) and the reporter's state: withheld and floored metrics, the
        served parts ignored, a refused key, the last error. See ``Stats``.

        After ``close()``: the stats as they were when it closed (``queued`` then counts what
        stays in the queue file for the next start).

        Raises:
            QueueError: the reporter is closed and its last stats could not be read.
        """
        if self._queue.closed:
            if self._last_stats is None:
                raise QueueError("the reporter is closed and its last stats could not be read")
            return self._last_stats
        resolution = self._resolution
        return replace(
            self._queue.stats(),
            cap_refused=self._guard.cap_refused,
            withheld_metrics=dict(resolution.withheld),
            floored_metrics=dict(resolution.floored),
            ignored_served={name: len(parts) for name, parts in resolution.ignored.items()},
            key_refused=(self._sender.key_refused
                         or self._fetcher.last_kind == "key_refused"),
            last_error=self.last_error,
            period_skipped=self._periods.skipped if self._periods is not None else 0,
            dimension_problems=dict(self._dimension_problems),
            enabled=self._enabled)

    def ledger(self) -> dict[str, LedgerEntry]:
        """metric -> perturbed bits committed to the queue (handed over) and sent.

        Raises:
            QueueError: the reporter is closed.
        """
        self._check_open()
        return self._queue.ledger()

    def dead_letters(self) -> list[DeadLetter]:
        """Batches the collector refused for good (400, 409, 413, 422), with its reasons.

        Raises:
            QueueError: the reporter is closed.
        """
        self._check_open()
        return self._queue.dead_letters()

    def _check_open(self) -> None:
        if self._queue.closed:
            raise QueueError("the reporter is closed")

    def retry_dead_letters(self) -> int:
        """Queue every dead-lettered batch again, unchanged (same batch ids), once the cause
        is fixed, e.g. a metric registered late. Returns the number of reports requeued."""
        if self._queue.closed:
            raise QueueError("the reporter is closed")
        return self._queue.retry_dead_letters()

    def retry_refused(self, metric: str | None = None) -> int:
        """Send again the reports the collector refused per metric (``stats().refused``, with
        its reasons in ``stats().refused_metrics``), of ``metric`` or of every metric, once
        the cause is fixed. They go in new batches: the collector never counted them. This
        happens by itself for a metric whose refused reports' mechanism the collector's
        catalogue serves at a fetch (e.g. once the operator registers the app's declared
        mechanism). Returns the number requeued."""
        if self._queue.closed:
            raise QueueError("the reporter is closed")
        return self._queue.retry_refused(metric)

    @property
    def last_error(self) -> str | None:
        """The latest upload (or catalogue fetch) failure, None after a success; e.g.
        "... answered 401: the collector refused the ingest key (...)"."""
        return self._sender.last_error or self._fetcher.last_error

    # -- flushing and shutdown -------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Commit and seal everything queued, upload it now, and wait up to ``timeout``.

        Returns within ``timeout`` (plus scheduling delays) whatever the network does: an
        upload still in flight then carries on in the background.

        Args:
            timeout: seconds to wait; ``close_timeout`` by default.

        Returns:
            True if the queue was empty at return: every report handed over so far was sent
            (or dead-lettered or dropped, see ``stats()``). False at the deadline; nothing
            is lost then: the queue keeps the rest and keeps retrying.
        """
        if self._queue.closed:
            raise QueueError("the reporter is closed")
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)

        def left() -> float:
            return deadline - time.monotonic()

        # Every wait on the queue file is bounded by the deadline: another thread's slow
        # SQLite write (a loaded disk) never holds this call past it.
        self._queue.commit(seal_all=True, timeout=left())
        self._sender.hurry()
        while True:
            if not self._queue.has_work(timeout=left()):
                return True
            if left() <= 0:
                return False
            if self._queue.has_pending(timeout=left()):  # reports arrived meanwhile
                self._queue.commit(seal_all=True, timeout=left())
                self._sender.hurry()
            self._sender.wait_for_progress(min(max(left(), 0.0), 0.1))

    def close(self, timeout: float | None = None) -> bool:
        """Flush with a deadline, stop the threads and close the queue. Idempotent.

        Returns within ``timeout`` (``close_timeout`` by default) whatever the network does.
        A request still in flight at the deadline is abandoned; its batch stays queued
        under the same batch id, so a later send is still counted once. What is not sent
        by the deadline stays in the queue file (sent on the next start); with the
        in-memory queue it is lost, and ``stats().queued`` said how much.

        Returns:
            True if everything was sent before closing.
        """
        with self._close_lock:
            if self._closed:
                return True
            self._closed = True
        with _OPEN_LOCK:
            _OPEN.discard(self)
        wait = self.close_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        drained = False
        try:
            drained = self.flush(wait)
        finally:
            self._fetcher.stop()
            self._sender.stop(timeout=max(0.0, deadline - time.monotonic()))
            try:
                self._queue.stop()  # commits what is buffered: the last stats count it
                self._last_stats = self.stats()
            except Exception:  # never fail close(); stats() then says it could not read them
                log.exception("deniable: reading the last stats at close failed")
            self._queue.close()
            self._guard.close()
        if not drained:
            log.warning("deniable: closed with reports still queued")
        return drained

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- threads, fork, exit ---------------------------------------------------------------

    def _on_sealed(self) -> None:
        self._sender.wake()

    def _after_fork_in_child(self) -> None:
        self._close_lock = threading.Lock()
        self._queue.after_fork_in_child()
        self._sender.after_fork_in_child()
        self._fetcher.after_fork_in_child()


def _check_verify(verify: Verify, insecure_skip_verify: bool) -> bool | str:
    """``verify`` for every request; refuses False unless insecure on purpose."""
    if verify is False:
        if insecure_skip_verify is not True:
            raise InvalidParameterError(
                "Connection(verify=False) sends without checking the collector's certificate, "
                "so anyone on the path can read and change the traffic. Give verify the path "
                "of your CA bundle instead, or also set insecure_skip_verify=True if you mean "
                "it.")
        log.warning("deniable: TLS certificate verification is OFF (insecure_skip_verify)")
        return False
    if insecure_skip_verify:
        raise InvalidParameterError(
            f"Connection(insecure_skip_verify=True) goes with verify=False only. "
            f"Got verify={verify!r} instead.")
    if verify is True:
        return True
    if not isinstance(verify, (str, os.PathLike)):
        raise InvalidParameterError(
            f"verify must be True, False or a CA bundle path. Got {verify!r} instead.")
    path = os.fspath(verify)
    if not os.path.exists(path):
        raise InvalidParameterError(f"verify names a CA bundle that does not exist: {path}")
    return path


def _declared_catalogue(metrics: Declared | str | os.PathLike[str] | None, max_epsilon: float,
                        skipped: dict[str, str], dimensions: AllDimensions,
                        policies: AllPolicies) -> Catalogue:
    """The app's declared metrics (a mapping or a metrics TOML file; none if None), checked
    against the ceiling: declaring a mechanism above ``max_epsilon`` is a programming error.
    A file's metrics of kinds this client does not know go to ``skipped``; the public
    dimensions and collection policies declared go to ``dimensions`` and ``policies``."""
    if metrics is None:
        log.warning("deniable: Reporter() declares no metrics (metrics=...): nothing will be "
                    "reported; report() raises UnknownMetricError (docs/client.md)")
        return {}
    if not isinstance(metrics, (str, os.PathLike, Mapping)):
        raise InvalidParameterError(
            f"metrics must be the path of a metrics TOML file or a mapping of metric names to "
            f"declarations. Got a {type(metrics).__name__} instead.")
    declared = (load_metrics_file(metrics, skipped, dimensions, policies)
                if isinstance(metrics, (str, os.PathLike))
                else coerce_catalogue(metrics, dimensions, policies))
    above = sorted(f"{name} ({s.mechanism.id}, epsilon {s.mechanism.epsilon:.3g})"
                   for name, s in declared.items() if above_ceiling(s, max_epsilon))
    if above:
        raise InvalidParameterError(
            f"declared metrics above max_epsilon {max_epsilon:.3g}: {', '.join(above)}. "
            f"Choose a more private mechanism, or raise max_epsilon knowingly.")
    return declared


def _check_device_dimensions(dimensions: object) -> dict[str, str]:
    """``Reporter(dimensions=...)``: a mapping of dimension names to str values (whether a
    metric's list allows a value is known only with the catalogue)."""
    if dimensions is None:
        return {}
    if not isinstance(dimensions, Mapping):
        raise InvalidParameterError(
            f"dimensions must map dimension names to str values, e.g. {{'platform': "
            f"'android'}}. Got a {type(dimensions).__name__} instead.")
    for name, value in dimensions.items():
        if not isinstance(name, str) or not DIMENSION_NAME.match(name):
            raise DimensionError(
                f"dimensions: {name!r} is not a dimension name (lowercase letters, digits "
                f"and '_', at most 32 characters)", str(name))
        if not isinstance(value, str):
            raise DimensionError(
                f"dimensions: dimension {name!r} takes a str value. Got a "
                f"{type(value).__name__} instead.", name)
    return dict(dimensions)


def _stated_dims(metric: str, route: _DimensionRoute | None,
                 dims: Mapping[str, str] | None) -> str:
    """The queued dims text of one report of ``metric``: the device-wide values the metric
    declares, overridden by ``dims``, normalized by its ``Dimensions``.

    Raises:
        DimensionError: a dimension the metric does not declare, a value that is not a str,
            or one off its list without ``other``; ``field`` names the dimension.
    """
    if not dims:
        if route is not None and route.error is not None:
            raise DimensionError(route.error, route.field)
        return route.text if route is not None else ""
    if route is not None and type(dims) is dict:  # the common case: seen before
        try:
            text = route.seen.get(tuple(dims.items()))
        except TypeError:  # an unhashable value: refused below
            text = None
        if text is not None:
            return text
    check_stated(dims)
    for name, value in dims.items():
        if not isinstance(value, str):
            raise DimensionError(
                f"metric {metric!r}: dimension {name!r} takes a str value. Got a "
                f"{type(value).__name__} instead. Nothing was reported.", str(name))
    key = tuple(dims.items())
    if route is not None:
        declared, merged = route.dimensions, {**route.device, **dims}
    else:
        declared, merged = NONE, dict(dims)
    try:
        text = dims_text(declared.normalize(merged))
    except DimensionError as exc:
        if route is not None and route.error is not None and exc.field not in dims:
            raise DimensionError(route.error, route.field) from None
        raise DimensionError(f"metric {metric!r}: {exc}. Nothing was reported.",
                             exc.field) from None
    assert route is not None  # NONE refuses every dimension
    if len(route.seen) >= _SEEN_DIMS:
        route.seen.clear()  # bounded, whatever values an app passes (others map to "other")
    route.seen[key] = text
    return text


def _encode(metric: str, spec: MetricSpec, value: object) -> bool | int | Fraction:
    """``spec.encode(value)``, refused with a message that never shows the value (it is the
    secret): only its type, and what the metric takes."""
    kind = spec.kind_object
    try:
        return kind.encode(spec, value)
    except InvalidParameterError:
        pass  # raised below, outside the handler: the original message is not chained
    raise InvalidParameterError(kind.refusal_message(metric, spec, value))


def _close_all_at_exit() -> None:
    with _OPEN_LOCK:
        reporters = list(_OPEN)
    # One deadline for all: the app's exit waits at most the longest exit_timeout.
    deadline = time.monotonic() + max((r.exit_timeout for r in reporters), default=0.0)
    for reporter in reporters:
        try:
            left = min(reporter.exit_timeout, deadline - time.monotonic())
            reporter.close(timeout=max(0.0, left))
        except Exception:  # never fail the app's exit
            log.exception("deniable: closing a reporter at exit failed")


_FORK_HELD: list[Reporter] = []


def _before_fork() -> None:
    # Hold every queue's lock across fork(): then none of our threads is inside SQLite (whose
    # global mutexes a child would otherwise inherit locked) at the moment of the fork.
    _OPEN_LOCK.acquire()
    _FORK_HELD[:] = list(_OPEN)
    for reporter in _FORK_HELD:
        reporter._queue.hold_for_fork()


def _after_fork_in_parent() -> None:
    for reporter in _FORK_HELD:
        reporter._queue.release_after_fork()
    _FORK_HELD.clear()
    _OPEN_LOCK.release()


def _restart_in_child() -> None:
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()
    _FORK_HELD.clear()
    for reporter in list(_OPEN):
        if not reporter._closed:
            reporter._after_fork_in_child()


atexit.register(_close_all_at_exit)
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_restart_in_child)
