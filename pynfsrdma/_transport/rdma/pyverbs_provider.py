"""A verbs provider on pyverbs (librdmacm + libibverbs) for real RDMA devices (and soft-RoCE/siw).

Proven in the real-RDMA rig (``tests/vm``: Debian's rdma-core 44 and Linux 6.1 in a qemu guest,
against the kernel's nfsd over rxe and siw); on this machine it is exercised only up to the "no
RDMA device" check.

Never blocking the event loop: pyverbs' blocking calls hold the GIL, so every wait is on a file
descriptor from trio (``trio.lowlevel.wait_readable``), and a blocking call is made only once its
descriptor is readable:

* the connection manager runs in asynchronous mode on a :class:`CMEventChannel`; ``CMEvent(ch)``
  is read only when the channel's descriptor is readable;
* one completion queue per connection, bound to a :class:`CompChannel`; after each notification
  the queue is drained with non-blocking ``poll`` and re-armed (``req_notify``);
* ``rdma_connect`` can wait in the kernel itself (iWARP opens its TCP connection inside the
  call: minutes to a dead address), so it is made through ctypes, which lets go of the GIL, in a
  worker thread (:meth:`PyverbsConnection.connect_cm`);
* no graceful ``rdma_disconnect``: destroying the CM ID aborts the connection at once, while a
  graceful close on iWARP makes the destruction wait for TCP when the link is gone.

pyverbs exposes neither descriptor, so each is found as the one that appeared in
``/proc/self/fd`` while the channel was created (``/dev/infiniband/rdma_cm`` for the CM channel,
the ``[infinibandevent]`` anonymous inode for the completion channel).

Completions are matched by order: an RC queue pair completes its send-queue work requests in the
order they were posted (every one signalled), and receives in the order they were posted. A
failed completion moves the queue pair to the error state and flushes the rest, which is how
faults reach every pending operation.

Remote invalidation (RFC 8797's "I" bit): a peer's Send With Invalidate can only retire a
fast-registered memory region (kernel only) or a type 2 memory window; an ``ibv_reg_mr`` region
it names fails the queue pair (rxe) or is invalidated without the Receive completion saying so
(siw's user-space provider reports no ``IBV_WC_WITH_INV``). So on a device with type 2 memory
windows (rxe) the connection has a QP of its own (pyverbs ``QP``: librdmacm's ``CMID`` posts no
other work request than Send, Receive, RDMA Read and Write), moved through INIT, RTR and RTS with
the connection manager's attributes as librdmacm does (``rdma_establish`` after the connect
response), and every region the peer may reach is a memory window bound over its memory region
by a Bind MW work request; its rkey is the handle, which a Send With Invalidate retires and
local invalidation deallocates. :meth:`PyverbsConnection.bind` binds such a window over part of a
region registered once (``supports_windows``), which is how RPC-over-RDMA reaches chunk memory
without a registration per call (:mod:`.chunk_memory`). A window the peer's Send With Invalidate
retired goes back to the connection's pool of windows (:mod:`.memory_windows`), to be bound
again with the next key for a later I/O. The provider then advertises remote invalidation
(``supports_remote_invalidation`` when every device has them) and can send it. Elsewhere (siw)
librdmacm makes and drives the QP, regions are plain memory regions and remote invalidation is
neither advertised nor sent.

Teardown closes every verbs object once, in dependency order, and never leaves one to the
garbage collector: the ``Context`` and ``PD`` objects pyverbs makes for a CMID wrap librdmacm's
*shared* device context and protection domain. ``CMID.close`` detaches them, but when the cyclic
garbage collector clears an unclosed CMID's attributes first, their own ``__dealloc__`` closes
librdmacm's device context (its command descriptor: later verbs calls in the process fail with
EBADF) and frees its PD (double free). So :meth:`PyverbsConnection.aclose` deregisters the memory
windows and regions (before the last CM ID of a device goes: librdmacm then frees the device's
PD), then closes our QP if we made it, the CMID (its QP and the CM ID), the CQ, the completion
channel and the event channel; trio is told (``notify_closing``) before a descriptor it may wait
on is closed.

RFC 8797 private data goes in ``rdma_connect``'s parameters; the peer's comes from the
ESTABLISHED or CONNECT_RESPONSE (active side) or CONNECT_REQUEST (passive side) event.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import trio

from ..._trio_compat import run_sync_abandoning
from ..base import ConnectionLost, ConnectRefused
from .memory_windows import MemoryWindows, VerbsRegion, inc_rkey
from .provider import (
    Access,
    Buffer,
    Connection,
    Listener,
    MemoryRegion,
    NoRdmaDevice,
    PinnedBuffer,
    PrivateDataReply,
    Provider,
    ProviderCounters,
    ProviderError,
    Received,
    ReceiverNotReady,
    RemoteAccessError,
    registrable,
)

log = logging.getLogger(__name__)

RESOLVE_TIMEOUT_MS = 2000
QUEUE_DEPTH = 128


def _load_pyverbs() -> dict[str, Any]:
    """The pyverbs modules, or :class:`NoRdmaDevice` saying why they cannot be used here."""
    try:
        import pyverbs.cm_enums as cme
        import pyverbs.cmid as cmid
        import pyverbs.cq as cq
        import pyverbs.device as device
        import pyverbs.enums as enums
        import pyverbs.mr as mr
        import pyverbs.qp as qp
        import pyverbs.wr as wr
        from pyverbs.pyverbs_error import PyverbsError
    except ImportError as e:
        raise NoRdmaDevice(f"no RDMA device: pyverbs is not installed ({e})") from e
    try:
        devices = device.get_device_list()
    except PyverbsError as e:
        raise NoRdmaDevice(f"no RDMA device: {e}") from e
    if not devices:
        raise NoRdmaDevice("no RDMA device: the device list is empty")
    return {
        "cmid": cmid, "cq": cq, "device": device, "enums": enums, "mr": mr, "qp": qp, "wr": wr,
        "cme": cme, "error": PyverbsError,
    }  # fmt: skip


def open_pyverbs_provider() -> PyverbsProvider:
    """A pyverbs provider; raises :class:`NoRdmaDevice` when pyverbs or a device is missing."""
    return PyverbsProvider(_load_pyverbs())


# -- descriptors pyverbs does not expose ----------------------------------------------------------
def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return out


def _new_fd(before: dict[int, str], wanted: Callable[[str], bool], what: str) -> int:
    fresh = [fd for fd, target in _fds().items() if wanted(target) and before.get(fd) != target]
    if len(fresh) != 1:
        raise ProviderError(f"cannot find the file descriptor of the {what} ({len(fresh)} candidates)")
    return fresh[0]


# -- librdmacm calls that may block in the kernel --------------------------------------------------
class _RdmaConnParam(ctypes.Structure):
    """librdmacm's ``struct rdma_conn_param``."""

    _fields_ = [
        ("private_data", ctypes.c_void_p), ("private_data_len", ctypes.c_uint8),
        ("responder_resources", ctypes.c_uint8), ("initiator_depth", ctypes.c_uint8),
        ("flow_control", ctypes.c_uint8), ("retry_count", ctypes.c_uint8),
        ("rnr_retry_count", ctypes.c_uint8), ("srq", ctypes.c_uint8), ("qp_num", ctypes.c_uint32),
    ]  # fmt: skip


_CM_ID_CHANNEL = 8  # offsetof(struct rdma_cm_id, channel): after verbs
_CM_ID_CONTEXT = 16  # offsetof(struct rdma_cm_id, context): after verbs, channel
_CM_ID_QP = 24  # offsetof(struct rdma_cm_id, qp): after verbs, channel, context
_QP_NUM = 52  # offsetof(struct ibv_qp, qp_num): six pointers and the handle before it
_librdmacm: Any = None

# rxe (Linux 6.1) marks a user-space Receive completion of a Send With Invalidate with the
# kernel's IB_WC_WITH_INVALIDATE, 1 << 2, where libibverbs has IBV_WC_IP_CSUM_OK (a checksum
# offload flag of raw Ethernet and UD receives, never set on an RC receive); IBV_WC_WITH_INV is
# 1 << 3. The invalidated rkey is where libibverbs expects it.
_RXE_WITH_INV = 1 << 2


def _rdma_connect_entry() -> Any:
    """librdmacm's ``rdma_connect`` through ctypes (None when the library cannot be loaded).

    ctypes releases the GIL for the length of a foreign call; pyverbs' Cython wrappers do not."""
    global _librdmacm
    if _librdmacm is None:
        try:
            lib = ctypes.CDLL("librdmacm.so.1", use_errno=True)
            fn = lib.rdma_connect
        except (OSError, AttributeError):
            _librdmacm = False
        else:
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_RdmaConnParam)]
            fn.restype = ctypes.c_int
            _librdmacm = fn
    return _librdmacm or None


def _cm_id_address(cmid: Any, channel_fd: int, own_qp: bool) -> int | None:
    """The address of the ``struct rdma_cm_id`` a pyverbs CMID wraps (pyverbs keeps it in a C
    field of the object and does not expose it); None if it cannot be told.

    The object's words are scanned: a word is skipped when it is null or one of the object's own
    Python references (so every word read through is a C pointer of the object: the Cython vtable
    or the CM ID), and the CM ID is the one whose ``channel`` is our event channel (its first
    member is the descriptor) and whose ``qp`` has the QP number pyverbs reports (a QP made by
    librdmacm) or is null (``own_qp``: a QP of our own, and then no user context either)."""
    try:
        qpn = cmid.qpn
        size = type(cmid).__basicsize__
    except AttributeError:
        return None
    if not own_qp and not qpn:
        return None
    skip = {id(o) for o in gc.get_referents(cmid)} | {id(type(cmid))}
    base = id(cmid)
    for off in range(16, size - 7, 8):  # after the object's reference count and type
        p = ctypes.c_size_t.from_address(base + off).value
        if not p or p in skip:
            continue
        channel = ctypes.c_size_t.from_address(p + _CM_ID_CHANNEL).value
        if not channel or ctypes.c_int.from_address(channel).value != channel_fd:
            continue
        qp = ctypes.c_size_t.from_address(p + _CM_ID_QP).value
        if own_qp:
            if not qp and not ctypes.c_size_t.from_address(p + _CM_ID_CONTEXT).value:
                return p
        elif qp and ctypes.c_uint32.from_address(qp + _QP_NUM).value == qpn:
            return p
    return None


_pending_connects: dict[str, int] = {}  # peer -> rdma_connect calls abandoned but still in the kernel
_pending_lock = threading.Lock()


# -- one connection -----------------------------------------------------------------------------
class PyverbsConnection(Connection):
    """One RC queue pair over librdmacm.

    ``own_qp``: the queue pair is ours (pyverbs ``QP``), moved through its states by us from the
    CM's attributes, and the regions the peer may reach are type 2 memory windows bound over
    their memory regions (see the module docstring); else librdmacm makes and drives the QP and
    the regions are plain memory regions.

    Counters (as the software provider's): ``registrations`` (alive now),
    ``local_invalidations`` (regions we invalidated: invalidate, or deregister of a valid one),
    ``remote_invalidations`` (our regions the peer invalidated with Send With Invalidate),
    ``double_invalidations`` (an invalidation, local or remote, of a region already invalid),
    ``unknown_invalidations`` (a Send With Invalidate naming no region of ours),
    ``notifications`` (completion events the completion channel woke :meth:`run` with) and
    ``completions`` (work completions polled after them), and what the connection cost in
    ``counters`` (:class:`~.provider.ProviderCounters`).
    """

    supports_remote_invalidation = False

    def __init__(
        self,
        pv: dict[str, Any],
        cmid: Any,
        events: _EventChannel,
        peer: str,
        peer_private_data: bytes,
        *,
        owns_events: bool,
        own_qp: bool = False,
    ) -> None:
        self._pv = pv
        self.own_qp = own_qp
        self.supports_remote_invalidation = own_qp  # memory windows: see the module docstring
        self.qp: Any = None
        self.local_invalidations = 0
        self.remote_invalidations = 0
        self.double_invalidations = 0
        self.unknown_invalidations = 0
        self.notifications = 0
        self.completions = 0
        self.counters = ProviderCounters()
        self.cmid = cmid
        self._events = events
        self._owns_events = owns_events  # the active side's channel is the connection's own
        self.channel_fd = events.fd
        self.peer = peer
        self.peer_private_data = peer_private_data
        self.cq: Any = None
        self.comp_channel: Any = None
        self.comp_fd = -1
        self._send_queue: deque[tuple[trio.Event, list[BaseException | None], Any]] = deque()
        self._recv_queue: deque[MemoryRegion] = deque()
        self._completions_tx, self._completions_rx = trio.open_memory_channel[Received | BaseException](
            QUEUE_DEPTH * 2
        )
        # every live region by id(); those the peer may reach also by handle (a device may give
        # every local-only region the same rkey: rxe gives them 0)
        self._regions: dict[int, VerbsRegion] = {}
        self._reachable: dict[int, VerbsRegion] = {}
        self._access_flags: dict[int, tuple[int, int, bool, bool]] = {}  # see _verbs_access
        self.windows = MemoryWindows(pv, cmid, self.counters, peer)
        self._error: BaseException | None = None
        self._closed = False
        self._released = False
        # a blocking librdmacm call made in a worker thread (rdma_connect, see _connect_cm)
        self._kernel_call_lock = threading.Lock()
        self._kernel_call_pending = False
        self._close_after_kernel_call = False

    @property
    def supports_windows(self) -> bool:  # type: ignore[override]
        """Memory windows are bound on a queue pair of our own (decided when connecting)."""
        return self.own_qp

    # queue pair set-up (before connect/accept)
    def create_qp(self) -> None:
        pv = self._pv
        before = _fds()
        self.comp_channel = pv["cq"].CompChannel(self.cmid.context)
        self.comp_fd = _new_fd(before, lambda t: "infinibandevent" in t, "completion channel")
        self.cq = pv["cq"].CQ(self.cmid.context, QUEUE_DEPTH * 2, None, self.comp_channel, 0)
        self.cq.req_notify()
        cap = pv["qp"].QPCap(max_send_wr=QUEUE_DEPTH, max_recv_wr=QUEUE_DEPTH, max_send_sge=1, max_recv_sge=1)
        # our own QP completes only the work requests that ask for it (every one but the Bind MW
        # requests chained before a Send: the Send's completion says they are done)
        init = pv["qp"].QPInitAttr(
            qp_type=pv["enums"].IBV_QPT_RC,
            scq=self.cq,
            rcq=self.cq,
            cap=cap,
            sq_sig_all=0 if self.own_qp else 1,
        )
        if self.own_qp:
            self.qp = pv["qp"].QP(self.cmid.pd, init)
            self._move_qp(pv["enums"].IBV_QPS_INIT)
        else:
            self.cmid.create_qp(init)

    def _move_qp(self, state: int) -> None:
        """Move our own QP to ``state`` with the attributes the connection manager gives."""
        attr, mask = self.cmid.init_qp_attr(state)
        self.qp.modify(attr, mask)

    def ready_qp(self) -> None:
        """Our own QP, once the connect response came: INIT again (the CM now knows the access
        rights and resources of the connection), RTR, RTS; as librdmacm does for its QPs."""
        e = self._pv["enums"]
        for state in (e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS):
            self._move_qp(state)

    async def connect_cm(self, private_data: bytes) -> None:
        """``rdma_connect``, without stopping trio while the kernel works on it.

        On iWARP (siw) the connect request makes the kernel open the TCP connection inside the
        system call, and to an address whose link is down that waits until TCP gives up (about
        two minutes). pyverbs' ``CMID.connect`` holds the GIL meanwhile, which freezes the whole
        client (and its lease renewals). So librdmacm's ``rdma_connect`` is called through ctypes
        (no GIL) in a worker thread; when the caller gives up (cancelled, a timeout), the thread
        is abandoned and closes the connection's verbs objects once the call returns. While one
        such call to a peer is still in the kernel, a new connect to that peer fails at once.
        Without the CM ID's address (another pyverbs), the blocking pyverbs call is used.
        """
        entry = _rdma_connect_entry()
        address = _cm_id_address(self.cmid, self.channel_fd, self.own_qp) if entry is not None else None
        qp_num = self.qp.qp_num if self.own_qp else 0
        if address is None:
            log.warning("%s: rdma_connect through pyverbs (blocks the event loop)", self.peer)
            self.cmid.connect(_conn_param(self._pv, private_data, qp_num))
            return
        with _pending_lock:
            if _pending_connects.get(self.peer):
                raise ConnectionLost(
                    "an earlier RDMA connect to it is still waiting in the kernel", self.peer
                )
        data = ctypes.create_string_buffer(private_data, len(private_data))
        param = _RdmaConnParam(
            ctypes.cast(data, ctypes.c_void_p) if private_data else None, len(private_data),
            CONNECT_RESOURCES, CONNECT_RESOURCES, 0, 5, 5, 0, qp_num,
        )  # fmt: skip

        def call() -> tuple[int, int]:
            rc = entry(address, ctypes.byref(param))
            err = ctypes.get_errno()
            with self._kernel_call_lock:
                self._kernel_call_pending = False
                close_now = self._close_after_kernel_call
            with _pending_lock:
                left = _pending_connects.pop(self.peer, 1) - 1
                if left:
                    _pending_connects[self.peer] = left
            if close_now:  # abandoned: its owner released the connection meanwhile
                self._close_verbs()
            return rc, err

        with self._kernel_call_lock:
            self._kernel_call_pending = True
        with _pending_lock:
            _pending_connects[self.peer] = _pending_connects.get(self.peer, 0) + 1
        keep = (data, param)  # alive while the call may still read them
        rc, err = await run_sync_abandoning(call)
        del keep
        if rc != 0:
            raise ConnectionLost(f"rdma_connect failed: {os.strerror(err)}", self.peer)

    # memory
    @property
    def registrations(self) -> int:
        """How many regions are registered now (valid or not)."""
        return len(self._regions)

    def _verbs_access(self, access: Access) -> tuple[int, int, bool, bool]:
        """The verbs access flags ``access`` gives the device (a local write) and the peer,
        whether windows may be bound over it, and whether it asks for more than remote access;
        worked out once for each value (the flags of an ``enum.IntFlag`` cost a Python call for
        every operator)."""
        key = int(access)
        known = self._access_flags.get(key)
        if known is None:
            e = self._pv["enums"]
            local = e.IBV_ACCESS_LOCAL_WRITE if access & (Access.LOCAL_WRITE | Access.REMOTE_WRITE) else 0
            remote = e.IBV_ACCESS_REMOTE_WRITE if access & Access.REMOTE_WRITE else 0
            if access & Access.REMOTE_READ:
                remote |= e.IBV_ACCESS_REMOTE_READ
            known = self._access_flags[key] = (
                local,
                remote,
                bool(access & Access.BIND),
                bool(access & ~(Access.REMOTE_READ | Access.REMOTE_WRITE)),
            )
        return known

    def register(self, buffer: Buffer, access: Access) -> MemoryRegion:
        view = registrable(buffer, access)
        e = self._pv["enums"]
        local, remote, bind, _ = self._verbs_access(access)
        window = self.own_qp and remote != 0
        # the peer reaches a memory window (its rkey can be invalidated) or the region itself
        flags = local | (e.IBV_ACCESS_MW_BIND if window else remote)
        if bind:
            if not self.own_qp:
                raise ProviderError("memory windows need a queue pair of our own", self.peer)
            flags |= e.IBV_ACCESS_MW_BIND
        try:
            pin = PinnedBuffer(view)
        except ValueError as err:
            raise ProviderError(f"cannot take the address of a buffer to register: {err}", self.peer) from err
        try:
            mr = self._pv["mr"].MR(self.cmid.pd, max(pin.length, 1), flags, address=pin.address)
        except self._pv["error"] as err:
            pin.release()
            raise ProviderError(f"memory registration failed: {err}", self.peer) from err
        handle, mw, mw_key = mr.rkey, None, None
        if window:
            try:
                handle, mw, mw_key = self._bind_window(mr, pin.address, max(pin.length, 1), remote)
            except BaseException:
                mr.close()
                pin.release()
                raise
        self.counters.registrations += 1
        region = VerbsRegion(handle, pin.address, view, access)
        region.mr = mr
        region.mw = mw
        region.mw_key = mw_key
        region.pin = pin
        region.recv_wr = None
        region.send_wr = None
        self._regions[id(region)] = region
        if remote:
            self._reachable[handle] = region
        return region

    def bind(self, region: MemoryRegion, offset: int, length: int, access: Access) -> MemoryRegion:
        r = self._regions.get(id(region))
        if r is None or r is not region or not r.valid or r.window or r.pin is None:
            raise ValueError("windows are bound over a valid registration")
        _, remote, _, more = self._verbs_access(access)
        if not self._verbs_access(r.access)[2] or more:
            raise ValueError("windows need a registration made with BIND, and give remote access only")
        if offset < 0 or length <= 0 or offset + length > r.length:
            raise ValueError(f"a window of {length} bytes at {offset} is outside the {r.length}-byte region")
        self._check()
        mw, mw_key = self.windows.allocate()
        handle = inc_rkey(int(mw.rkey))  # the key its Bind MW request will give it
        w = VerbsRegion(handle, r.pin.address + offset, r.buffer[offset : offset + length], access, window=True)
        w.mr = r.mr
        w.mw = mw
        w.mw_key = mw_key
        w.pin = None
        w.recv_wr = None
        w.send_wr = None
        self._regions[id(w)] = w
        self._reachable[handle] = w
        self.windows.queue(w, remote)  # posted with the next Send (send_region)
        self.counters.binds += 1
        return w

    def _bind_window(
        self, mr: Any, address: int, length: int, remote: int
    ) -> tuple[int, Any, ctypes.c_uint32 | None]:
        """A type 2 memory window over ``length`` bytes of ``mr`` at ``address``, bound at once by
        a Bind MW work request of its own on our send queue (it takes effect before the Send that
        names it, posted later on the same queue): its rkey, the window and its struct's rkey
        member. :meth:`bind` instead leaves its request to go out chained with the next Send."""
        self._check()
        mw, key = self.windows.allocate()
        wr = self.windows.bind_wr(mw, mr, address, length, remote)
        try:
            self._post_nowait(lambda: self.qp.post_send(wr), wr)
        except BaseException:
            mw.close()
            raise
        if key is not None:
            key.value = wr.rkey  # the key the next bind of this window is checked against
        return wr.rkey, mw, key

    def invalidate(self, region: MemoryRegion) -> None:
        if not region.valid:
            if self._error is None:
                self.double_invalidations += 1
            return
        r = self._regions.get(id(region))
        if r is not None and r.window:
            self.windows.drop(r)
        if r is not None and r.mw is not None:
            # deallocating the window invalidates its rkey; the memory region stays until
            # deregister
            self.local_invalidations += 1
            region.valid = False
            r.mw.close()
            r.mw = None
        else:  # a plain memory region: invalidating it means deregistering it
            self.deregister(region)

    def deregister(self, region: MemoryRegion) -> None:
        r = self._regions.pop(id(region), None)
        if r is None:
            region.valid = False
            return
        if self._reachable.get(r.handle) is r:
            del self._reachable[r.handle]
        if r.window:
            self.windows.drop(r)
        retired = not region.valid  # by the peer's Send With Invalidate (a local one closed r.mw)
        if region.valid and self._error is None:
            self.local_invalidations += 1
        region.valid = False
        if r.mw is not None:
            if retired and r.mw_key is not None and self._error is None and not self._released:
                self.windows.give_back(r.mw, r.mw_key)  # free: bound again for a later I/O
            else:
                r.mw.close()
            r.mw = None
        if r.window:  # the memory region under it stays
            return
        r.mr.close()
        if r.pin is not None:
            r.pin.release()
        self.counters.deregistrations += 1

    # two-sided
    def post_recv(self, region: MemoryRegion) -> None:
        self._check()
        if not isinstance(region, VerbsRegion) or not region.access & Access.LOCAL_WRITE:
            raise ValueError("receive buffers must be registered with LOCAL_WRITE")
        if self.own_qp:
            wr = region.recv_wr
            if wr is None:  # the buffer is posted again as it is: one work request for its life
                sge = self._pv["wr"].SGE(region.mr.buf, region.length, region.mr.lkey)
                wr = region.recv_wr = self._pv["wr"].RecvWR(num_sge=1, sg=[sge])
            self.qp.post_recv(wr)
        else:
            self.cmid.post_recv(region.mr, region.length)
        self._recv_queue.append(region)

    async def receive(self) -> Received:
        item = await self._completions_rx.receive()
        if isinstance(item, BaseException):
            self._completions_tx.send_nowait(item)
            raise item
        return item

    async def _post(self, post: Callable[[], None], keep: Any = None) -> None:
        if self._error is not None:
            await trio.lowlevel.checkpoint()
            raise self._error
        done = trio.Event()
        slot: list[BaseException | None] = [None]
        self._queue_and_post(post, done, slot, keep)
        await done.wait()
        if slot[0] is not None:
            raise slot[0]

    def _post_nowait(self, post: Callable[[], None], keep: Any = None) -> None:
        """Post a work request whose completion no one waits for (a fault still fails the
        connection)."""
        self._queue_and_post(post, trio.Event(), [None], keep)

    def _queue_and_post(self, post: Callable[[], None], done: trio.Event, slot: list[BaseException | None],
                        keep: Any) -> None:
        """Queue what the completion of the work request ``post`` posts will set (``done``, the
        error in ``slot``; ``keep`` held until then), and post it."""
        self._send_queue.append((done, slot, keep))
        try:
            post()
        except self._pv["error"] as err:
            self._send_queue.pop()
            raise ProviderError(f"post failed: {err}", self.peer) from err
        self.counters.posts += 1

    def _work_request(self, opcode: int, region: VerbsRegion, length: int) -> Any:
        """A send-queue work request for our own QP, with one SGE over ``region``."""
        wr = self._pv["wr"]
        return wr.SendWR(opcode=opcode, num_sge=1, sg=[wr.SGE(region.mr.buf, length, region.mr.lkey)])

    async def send_region(self, region: MemoryRegion, length: int, invalidate: int | None = None) -> None:
        if invalidate is not None and not self.supports_remote_invalidation:
            raise ProviderError("Send With Invalidate needs a queue pair of our own", self.peer)
        if self._error is not None:  # the connection's fault first (its regions may be gone)
            await trio.lowlevel.checkpoint()
            raise self._error
        if not isinstance(region, VerbsRegion) or self._regions.get(id(region)) is not region:
            raise ValueError("send buffers must be registered")
        if not 0 <= length <= region.length:
            raise ValueError(f"a {length}-byte Send from a {region.length}-byte region")
        e = self._pv["enums"]
        self.counters.sends += 1
        if self.own_qp:
            # a send buffer's Send request is made once for each length and invalidated key and
            # posted again (a post copies the request into the send queue): a stream of calls
            # of one shape makes none
            made = region.send_wr
            if made is not None and made[0] == length and made[1] == invalidate:
                wr = made[2]
            else:
                opcode = e.IBV_WR_SEND if invalidate is None else e.IBV_WR_SEND_WITH_INV
                wr = self._work_request(opcode, region, length)
                if invalidate is not None:
                    wr.imm_data = invalidate  # ibv_send_wr's invalidate_rkey shares imm_data
                region.send_wr = (length, invalidate, wr)
            # the windows this call offers are bound by requests chained in front of its Send: one
            # post (one doorbell) and one completion for the call
            first, chain = self.windows.chain(wr)
            if len(chain) == 1:
                await self._post(lambda: self.qp.post_send(wr), (region, wr))
                return

            def post() -> None:
                try:
                    self.qp.post_send(first)
                except self._pv["error"]:
                    self.windows.not_posted()
                    raise
                self.windows.posted()

            await self._post(post, (region, chain))
        else:
            await self._post(lambda: self.cmid.post_send(region.mr, 0, length), region)

    # one-sided
    async def rdma_read(
        self, sink: MemoryRegion, sink_offset: int, handle: int, address: int, length: int
    ) -> None:
        part = self.register(sink.buffer[sink_offset : sink_offset + length], Access.LOCAL_WRITE)
        assert isinstance(part, VerbsRegion)
        try:
            if self.own_qp:
                wr = self._work_request(self._pv["enums"].IBV_WR_RDMA_READ, part, length)
                wr.set_wr_rdma(handle, address)
                await self._post(lambda: self.qp.post_send(wr), (part, wr))
            else:
                await self._post(lambda: self.cmid.post_read(part.mr, length, address, handle), part)
        finally:
            self.deregister(part)

    async def rdma_write(self, data: Sequence[Buffer], handle: int, address: int) -> None:
        offset = 0
        for b in data:
            view = memoryview(b).cast("B")
            part = self.register(view, Access(0))
            assert isinstance(part, VerbsRegion)

            def post(p: VerbsRegion = part, n: int = view.nbytes, a: int = address + offset) -> None:
                if self.own_qp:
                    wr = self._work_request(self._pv["enums"].IBV_WR_RDMA_WRITE, p, n)
                    wr.set_wr_rdma(handle, a)
                    self.qp.post_send(wr)
                else:
                    self.cmid.post_write(p.mr, n, a, handle)

            try:
                await self._post(post, part)
            finally:
                self.deregister(part)
            offset += view.nbytes

    # completions
    async def run(self) -> None:
        """Wait for completion notifications and dispatch completions, until the connection ends."""
        e = self._pv["enums"]
        try:
            while self._error is None and not self._released:
                try:
                    await trio.lowlevel.wait_readable(self.comp_fd)
                except trio.ClosedResourceError:
                    return  # aclose() is closing the completion channel
                if self._released:
                    return
                self.comp_channel.get_cq_event(self.cq)
                self.cq.ack_events(1)
                self.notifications += 1
                self.cq.req_notify()
                while True:
                    n, wcs = self.cq.poll(16)
                    if n <= 0:
                        break
                    self.completions += n
                    for wc in wcs[:n]:
                        self._complete(wc, e)
        except self._pv["error"] as err:
            self.fail(ProviderError(f"completion queue failed: {err}", self.peer))

    def _complete(self, wc: Any, e: Any) -> None:
        if wc.status != e.IBV_WC_SUCCESS:
            if wc.status == e.IBV_WC_REM_ACCESS_ERR:
                err: BaseException = RemoteAccessError(f"remote access error (status {wc.status})", self.peer)
            elif wc.status == e.IBV_WC_RNR_RETRY_EXC_ERR:
                err = ReceiverNotReady("receiver not ready", self.peer)
            else:
                err = ProviderError(f"work completion status {wc.status}", self.peer)
            self.fail(err)
            return
        if wc.opcode & e.IBV_WC_RECV:
            region = self._recv_queue.popleft()
            inv = None
            if wc.wc_flags & (e.IBV_WC_WITH_INV | _RXE_WITH_INV) and wc.imm_data:
                inv = wc.imm_data  # invalidated rkey (ibv_wc.invalidated_rkey shares imm_data)
                target = self._reachable.get(inv)
                if target is None:
                    self.unknown_invalidations += 1
                elif target.valid:
                    target.valid = False
                    self.remote_invalidations += 1
                else:
                    self.double_invalidations += 1
            self._completions_tx.send_nowait(Received(region, wc.byte_len, inv))
        else:
            done, _slot, _keep = self._send_queue.popleft()
            done.set()

    def fail(self, err: BaseException) -> None:
        """Break the queue pair: pending and later operations raise ``err``."""
        if self._error is not None:
            return
        self._error = err
        while self._send_queue:
            done, slot, _ = self._send_queue.popleft()
            slot[0] = err
            done.set()
        self._completions_tx.send_nowait(err)

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.fail(ConnectionLost("connection closed", self.peer))
        # no graceful rdma_disconnect: destroying the CM ID aborts the connection (iWARP: an
        # abortive close; IB/RoCE: a DREQ), which the peer sees as a disconnect all the same. A
        # graceful disconnect on iWARP (siw) closes the TCP stream in order, and when the link is
        # gone the CM ID's destruction then waits for TCP to give up (minutes, inside a pyverbs call
        # that holds the GIL: the whole client stalls and its lease expires)
        self.release()
        await trio.lowlevel.checkpoint()

    def release(self) -> None:
        """Close every verbs object of the connection, each once, in dependency order (see the
        module docstring). Safe to call twice and on a half-made connection."""
        if self._released:
            return
        self._released = True
        # trio forgets the descriptors it may wait on before they close (in this, trio's, thread)
        if self.comp_fd >= 0:
            trio.lowlevel.notify_closing(self.comp_fd)
            self.comp_fd = -1
        if self._owns_events:
            self._events.forget()
        with self._kernel_call_lock:
            if self._kernel_call_pending:
                # a worker thread is still inside rdma_connect on this CM ID (see _connect_cm):
                # destroying the ID now would wait for that call with the GIL held; the worker
                # closes everything once the call returns
                self._close_after_kernel_call = True
                return
        self._close_verbs()

    def _close_verbs(self) -> None:
        errors: list[str] = []

        def attempt(what: str, fn: Callable[[], Any]) -> None:
            try:
                fn()
            except self._pv["error"] as err:
                errors.append(f"{what}: {err}")

        # 1. memory regions: while the device's PD (freed with its last CM ID) still exists
        #    (the windows first, then the regions under them)
        for r in sorted(self._regions.values(), key=lambda region: not region.window):
            attempt("deregister", lambda region=r: self.deregister(region))  # type: ignore[misc]
        self.windows.close(attempt)
        # 2. the queue pair and the CM ID (CMID.close destroys both, or only the ID when the QP
        #    is our own, and detaches the shared Context and PD objects, so that they never free
        #    librdmacm's)
        if self.qp is not None:
            attempt("close QP", self.qp.close)
        attempt("close CM ID", self.cmid.close)
        # 3. the CQ (no QP uses it now), then its completion channel (trio first forgets the fd)
        if self.cq is not None:
            attempt("close CQ", self.cq.close)
        if self.comp_channel is not None:
            attempt("close completion channel", self.comp_channel.close)
        # 4. the CM event channel, after every CM ID on it
        if self._owns_events:
            attempt("close event channel", self._events.close)
        if errors:
            log.warning("%s: RDMA teardown: %s", self.peer, "; ".join(errors))


# -- the connection manager ---------------------------------------------------------------------
class _EventChannel:
    def __init__(self, pv: dict[str, Any]) -> None:
        self._pv = pv
        before = _fds()
        self.channel = pv["cmid"].CMEventChannel()
        self.fd = _new_fd(before, lambda t: t.endswith("rdma_cm"), "RDMA-CM event channel")

    def forget(self) -> None:
        """Tell trio the descriptor is about to close (in trio's thread)."""
        if self.fd >= 0:
            trio.lowlevel.notify_closing(self.fd)
            self.fd = -1

    def close(self) -> None:
        self.forget()
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    async def next_event(self) -> Any:
        await trio.lowlevel.wait_readable(self.fd)
        return self._pv["cmid"].CMEvent(self.channel)

    async def expect(self, wanted: int, what: str, peer: str) -> Any:
        ev = await self.next_event()
        kind = ev.event_type
        if kind != wanted:
            ev.ack_cm_event()
            cme = self._pv["cme"]
            if kind in (cme.RDMA_CM_EVENT_REJECTED, cme.RDMA_CM_EVENT_UNREACHABLE):
                raise ConnectRefused(f"{what}: {ev.event_str()}", peer)
            raise ConnectionLost(f"{what}: {ev.event_str()}", peer)
        return ev


CONNECT_RESOURCES = 16  # RDMA Read resources offered and asked for (responder_resources, initiator_depth)


def _conn_param(pv: dict[str, Any], private_data: bytes, qp_num: int = 0) -> Any:
    param = pv["cmid"].ConnParam(resources=CONNECT_RESOURCES, depth=CONNECT_RESOURCES, qp_num=qp_num)
    if private_data:
        param.set_private_data(private_data)
    return param


class PyverbsListener(Listener):
    def __init__(
        self, pv: dict[str, Any], nursery: trio.Nursery, host: str, port: int, private_data: PrivateDataReply
    ) -> None:
        self._pv = pv
        self._nursery = nursery
        self._private_data = private_data
        self._events = _EventChannel(pv)
        cmid, cme = pv["cmid"], pv["cme"]
        self.cmid = cmid.CMID(creator=self._events.channel, port_space=cme.RDMA_PS_TCP)
        ai = cmid.AddrInfo(src=host, src_service=str(port), port_space=cme.RDMA_PS_TCP, flags=cme.RAI_PASSIVE)
        self.cmid.bind_addr(ai)
        self.cmid.listen(16)
        self.port = port

    async def accept(self) -> Connection:
        pv = self._pv
        cme = pv["cme"]
        while True:
            ev = await self._events.next_event()
            if ev.event_type != cme.RDMA_CM_EVENT_CONNECT_REQUEST:
                ev.ack_cm_event()
                continue
            request = bytes(ev.private_data or b"")
            new = pv["cmid"].CMID(creator=ev, listen_id=self.cmid)
            ev.ack_cm_event()
            conn = PyverbsConnection(pv, new, self._events, "rdma-peer", request, owns_events=False)
            try:
                conn.create_qp()
                rep = self._private_data(request) if callable(self._private_data) else self._private_data
                new.accept(_conn_param(pv, rep))
                established = await self._events.expect(cme.RDMA_CM_EVENT_ESTABLISHED, "accept", conn.peer)
                established.ack_cm_event()
            except BaseException:
                conn.release()
                raise
            self._nursery.start_soon(conn.run)
            return conn

    async def aclose(self) -> None:
        self.cmid.close()
        self._events.close()
        await trio.lowlevel.checkpoint()


def has_type2_memory_windows(pv: dict[str, Any], ctx: Any) -> bool:
    """Whether the device of ``ctx`` (a pyverbs Context) has type 2 memory windows, the
    registrations a peer's Send With Invalidate can retire (see the module docstring)."""
    e = pv["enums"]
    try:
        flags = int(ctx.query_device().device_cap_flags)
    except (pv["error"], AttributeError, ValueError):
        return False
    return bool(flags & (e.IBV_DEVICE_MEM_WINDOW_TYPE_2A | e.IBV_DEVICE_MEM_WINDOW_TYPE_2B))


def every_device_has_type2_memory_windows(pv: dict[str, Any]) -> bool:
    """Whether every RDMA device of this machine has type 2 memory windows."""
    try:
        names = [d.name.decode() for d in pv["device"].get_device_list()]
    except (pv["error"], AttributeError):
        return False
    for name in names:
        try:
            ctx = pv["device"].Context(name=name)
        except pv["error"]:
            return False
        try:
            if not has_type2_memory_windows(pv, ctx):
                return False
        finally:
            ctx.close()
    return bool(names)


class PyverbsProvider(Provider):
    name = "pyverbs"
    supports_remote_invalidation = False  # set per machine in __init__ (see the module docstring)

    def __init__(self, pv: dict[str, Any]) -> None:
        self._pv = pv
        self.supports_remote_invalidation = every_device_has_type2_memory_windows(pv)

    async def connect(
        self, nursery: trio.Nursery, host: str, port: int, private_data: bytes = b""
    ) -> Connection:
        pv = self._pv
        cme = pv["cme"]
        peer = f"{host}:{port}"
        events = _EventChannel(pv)
        try:
            cmid = pv["cmid"].CMID(creator=events.channel, port_space=cme.RDMA_PS_TCP)
        except BaseException:
            events.close()
            raise
        conn = PyverbsConnection(pv, cmid, events, peer, b"", owns_events=True)
        try:
            ai = pv["cmid"].AddrInfo(dst=host, dst_service=str(port), port_space=cme.RDMA_PS_TCP)
            cmid.resolve_addr(ai, RESOLVE_TIMEOUT_MS)
            (await events.expect(cme.RDMA_CM_EVENT_ADDR_RESOLVED, "resolve address", peer)).ack_cm_event()
            cmid.resolve_route(RESOLVE_TIMEOUT_MS)
            (await events.expect(cme.RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve route", peer)).ack_cm_event()
            # a device with type 2 memory windows gets a QP of our own (see the module docstring)
            conn.own_qp = conn.supports_remote_invalidation = has_type2_memory_windows(pv, cmid.context)
            conn.create_qp()
            await conn.connect_cm(private_data)
            if conn.own_qp:
                # librdmacm leaves a QP it did not make to us: on the connect response, ready it
                # and complete the connection (rdma_establish)
                ev = await events.expect(cme.RDMA_CM_EVENT_CONNECT_RESPONSE, "connect", peer)
                conn.peer_private_data = bytes(ev.private_data or b"")
                try:
                    conn.ready_qp()
                    cmid.establish()
                finally:
                    ev.ack_cm_event()
            else:
                ev = await events.expect(cme.RDMA_CM_EVENT_ESTABLISHED, "connect", peer)
                conn.peer_private_data = bytes(ev.private_data or b"")
                ev.ack_cm_event()
        except pv["error"] as err:
            conn.release()
            raise ConnectionLost(f"RDMA connect failed: {err}", peer) from err
        except BaseException:
            conn.release()
            raise
        nursery.start_soon(conn.run)
        return conn

    async def listen(
        self, nursery: trio.Nursery, host: str, port: int, private_data: PrivateDataReply = b""
    ) -> Listener:
        try:
            return PyverbsListener(self._pv, nursery, host, port, private_data)
        except self._pv["error"] as err:
            raise ProviderError(f"cannot listen on {host}:{port}: {err}") from err


__all__ = ["PyverbsConnection", "PyverbsListener", "PyverbsProvider", "open_pyverbs_provider"]
