import OpenCombine

extension Publishers {
    /// A publisher created by applying the merge function to an arbitrary number of upstream
    /// publishers of one type.
    ///
    /// Same behaviour as `Merge` (see `MergeInner`). A `MergeMany` of no publishers finishes as
    /// soon as it is subscribed to: "every upstream has finished" already holds.
    public struct MergeMany<Upstream: Publisher>: Publisher {
        public typealias Output = Upstream.Output
        public typealias Failure = Upstream.Failure

        public let publishers: [Upstream]

        public init(_ upstream: Upstream...) {
            publishers = upstream
        }

        public init<S: Swift.Sequence>(_ upstream: S) where S.Element == Upstream {
            publishers = Array(upstream)
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: publishers.count)
            inner.start()
            for (index, publisher) in publishers.enumerated() {
                inner.subscribe(publisher, at: index)
            }
        }

        public func merge(with other: Upstream) -> MergeMany<Upstream> {
            MergeMany(publishers + [other])
        }
    }
}

extension Publishers.MergeMany: Equatable where Upstream: Equatable {}
