/// A shared source that greets each subscriber who joins it while it runs, e.g. with a snapshot
/// of the state its first subscribers were told when it started (the devices source posts the
/// devices it knows of, so a late subscriber's picture is as complete as an early one's).
///
/// Why a hook: a shared source's events go to all of its subscribers, and only the source knows
/// where in its stream a snapshot is consistent with what follows; the bus knows when someone
/// joins. The greeting reaches every subscriber of the source, marked as the source sees fit.
public protocol GreetsJoiningSubscribers: EventSource {
    /// Called on the subscribing thread when a subscription joins the source — not for the one
    /// that starts it — once the subscription is registered and has asked for its first demand,
    /// so whatever the source posts from then on reaches it. It may come before the source's
    /// `start` has run (two subscribers at once). Must not block or post from here.
    func subscriberJoined()
}
