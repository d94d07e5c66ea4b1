@testable import NATSBridge
import Testing

/// The origin queues alone: turns and who loses past the bounds. (Messages are never touched
/// here, so stand-in pointers do.)
struct OriginSharesTests {
    private func held(_ host: String, _ index: Int, bytes: Int = 10) -> OriginShares.Held {
        OriginShares.Held(message: OpaquePointer(bitPattern: index + 1)!,
                          route: ImportRoutes.Route(subject: Array("eventbus.\(host).app.x".utf8), action: .post, host: host, name: "app.x"),
                          bytes: bytes)
    }

    private func drain(_ shares: OriginShares) -> [String] {
        var order: [String] = []
        while let next = shares.next() { order.append(next.route.host) }
        return order
    }

    @Test func originsTakeTurnsAndEachKeepsItsOrder() {
        let shares = OriginShares(countLimit: 100, bytesLimit: 1 << 20)
        for index in 0..<5 { shares.append(held("evil", index)) { _, _ in Issue.record("nothing is over") } }
        shares.append(held("alpha", 100)) { _, _ in }
        shares.append(held("beta", 200)) { _, _ in }
        var taken: [(String, Int)] = []
        while let next = shares.next() { taken.append((next.route.host, Int(bitPattern: UnsafeRawPointer(next.message)) - 1)) }
        #expect(taken.map(\.0) == ["evil", "alpha", "beta", "evil", "evil", "evil", "evil"])
        #expect(taken.filter { $0.0 == "evil" }.map(\.1) == [0, 1, 2, 3, 4])
        #expect(shares.isEmpty && shares.count == 0 && shares.bytes == 0)
    }

    @Test func pastTheBoundsTheOriginHoldingTheMostLosesItsNewest() {
        let shares = OriginShares(countLimit: 4, bytesLimit: 1 << 20)
        var dropped: [(String?, Int)] = []
        func drop(_ held: OriginShares.Held, _ origin: String?) { dropped.append((origin, Int(bitPattern: UnsafeRawPointer(held.message)) - 1)) }
        shares.append(held("alpha", 100), drop: drop)
        for index in 0..<6 { shares.append(held("evil", index), drop: drop) }
        shares.append(held("alpha", 101), drop: drop)
        #expect(dropped.map(\.0) == ["evil", "evil", "evil", "evil"])
        #expect(dropped.map(\.1) == [3, 4, 5, 2], "each time the newest of the flooder's")
        #expect(drain(shares) == ["alpha", "evil", "alpha", "evil"])
    }

    @Test func pastTheBytesTheOriginHoldingTheMostBytesLoses() {
        let shares = OriginShares(countLimit: 100, bytesLimit: 1_000)
        var dropped: [String?] = []
        for index in 0..<5 { shares.append(held("alpha", index, bytes: 10)) { _, origin in dropped.append(origin) } }
        shares.append(held("evil", 10, bytes: 600)) { _, origin in dropped.append(origin) }
        shares.append(held("evil", 11, bytes: 600)) { _, origin in dropped.append(origin) }
        #expect(dropped == ["evil"])
        #expect(shares.bytes == 650)
        // A lone message is kept whatever its size.
        let lone = OriginShares(countLimit: 100, bytesLimit: 1_000)
        lone.append(held("big", 0, bytes: 5_000)) { _, _ in Issue.record("a lone message is kept") }
        #expect(lone.count == 1)
    }

    @Test func originsPastTheLimitShareOneUnnamedQueue() {
        let limit = OriginShares.originLimit
        let shares = OriginShares(countLimit: limit + 1, bytesLimit: 1 << 30)
        for index in 0..<limit { shares.append(held("host-\(index)", index)) { _, _ in Issue.record("nothing is over yet") } }
        var dropped: [String?] = []
        shares.append(held("extra-1", 1_000)) { _, origin in dropped.append(origin) }
        shares.append(held("extra-2", 1_001)) { _, origin in dropped.append(origin) }
        // The two extra origins share one queue, the longest: its newest goes, announced unnamed.
        #expect(dropped.count == 1 && dropped.first == .some(nil))
        #expect(drain(shares).count == limit + 1)
    }
}
