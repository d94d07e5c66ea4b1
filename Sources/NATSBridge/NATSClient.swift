import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization

/// One nats.c connection with the bridge's options: servers, authentication, TLS, reconnecting
/// forever with a doubling wait, and callbacks for what the bridge must count and announce.
///
/// ## Threads
/// nats.c calls ``Events`` on its own threads: connection events (disconnected, reconnected,
/// closed) and asynchronous errors (a slow consumer) on its connection-callback thread. The
/// closures must not block; the bridge only updates counters and wakes its own threads there.
///
/// ## Never waiting on nats.c's connection lock to ask
/// nats.c holds its connection's lock while it writes to the socket and while its reconnect
/// thread tries a server (up to the connect timeout each attempt): anything that takes that lock
/// — `natsConnection_Status`, a publish, a flush, an unsubscribe — waits meanwhile. Against a
/// server that hangs (frozen, or a link that black-holes) without a write deadline a write waits
/// for good once the socket's send buffer is full, and everything after it with it. So:
/// - ``state`` is not asked of nats.c: it is tracked from nats.c's connection callbacks into an
///   atomic (``State``), so status and the bridge's own threads read it without the lock;
/// - ``BridgeConfig/writeDeadline`` bounds every write (`natsOptions_SetWriteDeadline`): a write
///   that cannot finish within it fails, nats.c shuts the socket down and reconnects, and the
///   lock is released.
final class NATSClient: @unchecked Sendable {
    // @unchecked: `connection` is set once in `init` and read-only afterwards; nats.c's
    // connection is thread-safe.

    struct Events: Sendable {
        var disconnected: @Sendable () -> Void = {}
        var reconnected: @Sendable () -> Void = {}
        var closed: @Sendable () -> Void = {}
        /// An asynchronous error; `subscription` is set for one that concerns it (slow consumer).
        var error: @Sendable (_ status: natsStatus, _ subscription: OpaquePointer?) -> Void = { _, _ in }
    }

    enum State: UInt8, Sendable {
        case connecting, connected, reconnecting, closed

        var name: String {
            switch self {
            case .connecting: "connecting"
            case .connected: "connected"
            case .reconnecting: "reconnecting"
            case .closed: "closed"
            }
        }
    }

    private(set) var connection: OpaquePointer!
    private let events: Box
    private var retainedForCallbacks = false

    /// Starts connecting. Does not wait for a server: if none answers, nats.c keeps trying in
    /// the background (``State/connecting``) and `events.reconnected` tells when it is up, so a
    /// host never fails to start because NATS is down.
    init(config: BridgeConfig, name: String, events: Events) throws(BridgeError) {
        self.events = Box(events, reconnectWait: config.reconnectWait, maxReconnectWait: config.maxReconnectWait)
        var options: OpaquePointer?
        try BridgeError.check(natsOptions_Create(&options), .options, "natsOptions_Create")
        defer { natsOptions_Destroy(options) }
        try configure(options!, config, name: name)
        var connection: OpaquePointer?
        let status = natsConnection_Connect(&connection, options)
        guard status == NATS_OK || status == NATS_NOT_YET_CONNECTED, let connection else {
            // No connection: nats.c will never call `closed`, which releases the box.
            if retainedForCallbacks { Unmanaged.passUnretained(self.events).release() }
            throw BridgeError(.connection, "cannot connect to \(config.servers.joined(separator: ", ")): \(BridgeError.text(status))")
        }
        self.connection = connection
        // Connected at once: no callback says so. (Unless a callback already moved the state on.)
        if status == NATS_OK { self.events.state.compareExchange(expected: State.connecting.rawValue, desired: State.connected.rawValue, ordering: .relaxed) }
    }

    private func configure(_ options: OpaquePointer, _ config: BridgeConfig, name: String) throws(BridgeError) {
        var servers = config.servers.map { strdup($0) }
        defer { servers.forEach { free($0) } }
        let status = servers.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) {
                natsOptions_SetServers(options, $0, Int32(buffer.count))
            }
        }
        try BridgeError.check(status, .options, "servers \(config.servers)")
        try BridgeError.check(natsOptions_SetName(options, name), .options, "client name")
        switch config.authentication {
        case .none: break
        case .userPassword(let user, let password):
            try BridgeError.check(natsOptions_SetUserInfo(options, user, password), .options, "user and password")
        case .token(let token):
            try BridgeError.check(natsOptions_SetToken(options, token), .options, "token")
        case .nkey(let publicKey, let seedFile):
            try BridgeError.check(natsOptions_SetNKeyFromSeed(options, publicKey, seedFile), .options, "nkey seed \(seedFile)")
        case .credentials(let file):
            try BridgeError.check(natsOptions_SetUserCredentialsFromFiles(options, file, nil), .options, "credentials \(file)")
        }
        if let tls = config.tls {
            try BridgeError.check(natsOptions_SetSecure(options, true), .options, "TLS")
            if let ca = tls.caFile {
                try BridgeError.check(natsOptions_LoadCATrustedCertificates(options, ca), .options, "TLS CA \(ca)")
            }
            if let certificate = tls.certificateFile, let key = tls.keyFile {
                try BridgeError.check(natsOptions_LoadCertificatesChain(options, certificate, key), .options, "TLS certificate \(certificate) and key \(key)")
            }
        }
        try BridgeError.check(natsOptions_SetSendAsap(options, config.sendAsap), .options, "send asap")
        // Reconnect forever; the wait between attempts comes from `reconnectDelay`.
        try BridgeError.check(natsOptions_SetMaxReconnect(options, -1), .options, "max reconnect")
        // Durable mode keeps no reconnect buffer (0: nats.c 3.4 refuses every publish while
        // reconnecting): what it held would reach the next server first, ahead of the exporter's
        // re-publish of older unacknowledged exports, and be stored out of order.
        let reconnectBuffer = config.durable == nil ? Int32(clamping: config.reconnectBufferBytes) : 0
        try BridgeError.check(natsOptions_SetReconnectBufSize(options, reconnectBuffer), .options, "reconnect buffer")
        try BridgeError.check(natsOptions_SetMaxPendingMsgs(options, Int32(clamping: config.pendingLimit)), .options, "pending limit")
        try BridgeError.check(natsOptions_SetPingInterval(options, config.pingInterval.milliseconds), .options, "ping interval")
        try BridgeError.check(natsOptions_SetMaxPingsOut(options, Int32(clamping: config.maxPingsOut)), .options, "max pings out")
        try BridgeError.check(natsOptions_SetTimeout(options, max(500, min(2_000, config.pingInterval.milliseconds))), .options, "connect timeout")
        // Non-blocking socket, each write bounded: see the type's notes. 0 (none) is nats.c's default.
        try BridgeError.check(natsOptions_SetWriteDeadline(options, max(0, config.writeDeadline.milliseconds)), .options, "write deadline")
        // The callbacks' closure is the box, retained for nats.c until its last callback
        // (closed), so a callback still running while the client goes away finds it alive.
        let closure = Unmanaged.passRetained(events).toOpaque()
        retainedForCallbacks = true
        try BridgeError.check(natsOptions_SetCustomReconnectDelay(options, { _, attempts, closure in
            Unmanaged<Box>.fromOpaque(closure!).takeUnretainedValue().reconnectDelay(attempts: Int(attempts))
        }, closure), .options, "reconnect delay")
        try BridgeError.check(natsOptions_SetDisconnectedCB(options, { _, closure in
            let box = Unmanaged<Box>.fromOpaque(closure!).takeUnretainedValue()
            box.enter(.reconnecting)
            box.value.disconnected()
        }, closure), .options, "disconnected callback")
        try BridgeError.check(natsOptions_SetReconnectedCB(options, { _, closure in
            let box = Unmanaged<Box>.fromOpaque(closure!).takeUnretainedValue()
            box.enter(.connected)
            box.value.reconnected()
        }, closure), .options, "reconnected callback")
        try BridgeError.check(natsOptions_SetClosedCB(options, { _, closure in
            let box = Unmanaged<Box>.fromOpaque(closure!)
            box.takeUnretainedValue().enter(.closed)
            box.takeUnretainedValue().value.closed()
            box.release()  // nats.c calls nothing after this
        }, closure), .options, "closed callback")
        try BridgeError.check(natsOptions_SetErrorHandler(options, { _, subscription, status, closure in
            Unmanaged<Box>.fromOpaque(closure!).takeUnretainedValue().value.error(status, subscription)
        }, closure), .options, "error handler")
        // The first connect retries in the background too; `reconnected` announces success.
        try BridgeError.check(natsOptions_SetRetryOnFailedConnect(options, true, { _, closure in
            let box = Unmanaged<Box>.fromOpaque(closure!).takeUnretainedValue()
            box.enter(.connected)
            box.value.reconnected()
        }, closure), .options, "retry on failed connect")
    }

    /// The connection's state as nats.c's callbacks last told it: read without nats.c's
    /// connection lock (never `natsConnection_Status`, which waits for it), so it answers at once
    /// while nats.c is stuck writing to a hung server or trying one. It may lag nats.c by the
    /// callback's delivery: connected a moment after nats.c is, reconnecting a moment after the
    /// connection broke — what a publish meanwhile finds out by itself.
    var state: State { State(rawValue: events.state.load(ordering: .relaxed)) ?? .connecting }

    /// Closes the connection and waits until nats.c has stopped calling back. After this,
    /// `events` are no longer called and the client can go.
    func close() {
        natsConnection_Close(connection)
        events.enter(.closed)
    }

    deinit {
        if let connection { natsConnection_Destroy(connection) }
    }

    /// What nats.c's callbacks need, kept apart from the client so it can outlive it.
    private final class Box: Sendable {
        let value: Events
        let reconnectWait: Duration
        let maxReconnectWait: Duration
        /// ``State``'s raw value, written by nats.c's callbacks (and by `init` and `close`).
        let state = Atomic<UInt8>(State.connecting.rawValue)

        /// Closed is for good: a late callback does not reopen it.
        func enter(_ new: State) {
            var current = state.load(ordering: .relaxed)
            while current != State.closed.rawValue {
                let (exchanged, original) = state.compareExchange(expected: current, desired: new.rawValue, ordering: .relaxed)
                if exchanged { return }
                current = original
            }
        }

        init(_ value: Events, reconnectWait: Duration, maxReconnectWait: Duration) {
            self.value = value
            self.reconnectWait = reconnectWait
            self.maxReconnectWait = maxReconnectWait
        }

        /// Backoff: `reconnectWait` doubled per attempt, at most `maxReconnectWait`, ±20 % jitter
        /// so a thousand hosts that lost the same server do not come back in one wave.
        func reconnectDelay(attempts: Int) -> Int64 {
            let base = reconnectWait.milliseconds
            let wait = min(maxReconnectWait.milliseconds, base << min(max(attempts - 1, 0), 20))
            let jitter = Int64.random(in: -(wait / 5)...(wait / 5))
            return max(1, wait + jitter)
        }
    }
}

extension Duration {
    /// Whole milliseconds, as nats.c's options take them (from the SDK's clamped conversion).
    var milliseconds: Int64 { clampedNanoseconds / 1_000_000 }
}
