/// A shared source that greets each subscriber who joins it while it runs, e.g. with a snapshot
/// of the state its first subscribers were told when it started (the devices source tells a
/// late subscriber the devices it knows of, so its picture is as complete as an early one's).
///
/// Why a hook: a shared source's events go to all of its subscribers, and only the source knows
/// where in its stream a snapshot is consistent with what follows; the bus knows when someone
/// joins. The greeting reaches the joiner alone — subscribers already following are not told
/// again what they know.
///
/// **Exactly one snapshot.** A joiner takes none of the source's events posted to everyone
/// until its greeting completes: not the first snapshot the source posts to everyone (which it
/// may have joined before, or during), nor a change that its own snapshot covers. So whatever
/// the moment it joins, its first events are its greeting, once, and then what follows it.
/// The subscriber that starts the source is not greeted: it gets what the source posts to
/// everyone from its first event on.
public protocol GreetsJoiningSubscribers: EventSource {
    /// Called on the subscribing thread when a subscription joins the source — not for the one
    /// that starts it — once the subscription is registered and has asked for its first demand.
    /// It may come before the source's `start` has run (two subscribers at once). Must not block
    /// or post from here: keep `greeting` and post through it from the source's own thread.
    /// Every greeting must be completed (``SubscriberGreeting/post(contentsOf:completing:)``) —
    /// even one that joined before the source started — or its subscriber hears nothing more of
    /// the source.
    func subscriberJoined(_ greeting: SubscriberGreeting)
}

/// Posts to one subscription of a shared source: events numbered like any post and delivered in
/// sequence order with everything else the bus carries, but to that subscriber only. A
/// subscription cancelled meanwhile gets nothing.
public struct SubscriberGreeting: Sendable, Equatable {
    private let core: BusCore
    private let subscription: SubscriptionCore

    init(core: BusCore, subscription: SubscriptionCore) {
        self.core = core
        self.subscription = subscription
    }

    /// Greetings of the same subscription are equal.
    public static func == (a: SubscriberGreeting, b: SubscriberGreeting) -> Bool {
        a.subscription === b.subscription
    }

    /// Posts `events` in order to the joining subscriber; returns their sequence numbers (empty
    /// when the bus has finished). `completing` (the default) ends the greeting after them: from
    /// then on the subscriber takes what the source posts to everyone. A greeting in parts — a
    /// notice now, the snapshot once there is one — passes false for all but the last.
    @discardableResult
    public func post(contentsOf events: [Event], completing: Bool = true) -> Range<UInt64> {
        core.post(events, onlyTo: subscription, completing: completing)
    }
}
