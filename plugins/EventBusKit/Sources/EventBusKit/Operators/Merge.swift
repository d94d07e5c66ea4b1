import OpenCombine

// Apple Combine's `merge`, which OpenCombine 0.14.0 lacks (its issue #1). Same type names, generic
// parameters and overloads as Combine, so module code written against Combine compiles unchanged.
// All the behaviour lives in `MergeInner`; these types only subscribe their upstreams to it.

extension Publishers {
    /// A publisher created by applying the merge function to two upstream publishers.
    ///
    /// It emits the upstreams' values interleaved, in the order they arrive, finishes when both have
    /// finished, and fails as soon as either fails (cancelling the other).
    public struct Merge<A: Publisher, B: Publisher>: Publisher
    where A.Failure == B.Failure, A.Output == B.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B

        public init(_ a: A, _ b: B) {
            self.a = a
            self.b = b
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 2)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
        }

        public func merge<P: Publisher>(with other: P) -> Merge3<A, B, P>
        where P.Failure == Failure, P.Output == Output {
            Merge3(a, b, other)
        }

        public func merge<Z: Publisher, Y: Publisher>(with z: Z, _ y: Y) -> Merge4<A, B, Z, Y>
        where Z.Failure == Failure, Z.Output == Output, Y.Failure == Failure, Y.Output == Output {
            Merge4(a, b, z, y)
        }
    }

    /// A publisher created by applying the merge function to three upstream publishers.
    public struct Merge3<A: Publisher, B: Publisher, C: Publisher>: Publisher
    where A.Failure == B.Failure, A.Failure == C.Failure,
          A.Output == B.Output, A.Output == C.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B
        public let c: C

        public init(_ a: A, _ b: B, _ c: C) {
            self.a = a
            self.b = b
            self.c = c
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 3)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
            inner.subscribe(c, at: 2)
        }

        public func merge<P: Publisher>(with other: P) -> Merge4<A, B, C, P>
        where P.Failure == Failure, P.Output == Output {
            Merge4(a, b, c, other)
        }
    }

    /// A publisher created by applying the merge function to four upstream publishers.
    public struct Merge4<A: Publisher, B: Publisher, C: Publisher, D: Publisher>: Publisher
    where A.Failure == B.Failure, A.Failure == C.Failure, A.Failure == D.Failure,
          A.Output == B.Output, A.Output == C.Output, A.Output == D.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B
        public let c: C
        public let d: D

        public init(_ a: A, _ b: B, _ c: C, _ d: D) {
            self.a = a
            self.b = b
            self.c = c
            self.d = d
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 4)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
            inner.subscribe(c, at: 2)
            inner.subscribe(d, at: 3)
        }
    }
}

extension Publishers.Merge: Equatable where A: Equatable, B: Equatable {}
extension Publishers.Merge3: Equatable where A: Equatable, B: Equatable, C: Equatable {}
extension Publishers.Merge4: Equatable
where A: Equatable, B: Equatable, C: Equatable, D: Equatable {}

extension Publisher {
    /// Combines elements from this publisher with those from another publisher, delivering an
    /// interleaved sequence of elements.
    ///
    /// The merged publisher continues to emit elements until all upstream publishers finish. If an
    /// upstream publisher produces an error, the merged publisher fails with that error.
    public func merge<P: Publisher>(with other: P) -> Publishers.Merge<Self, P>
    where P.Failure == Failure, P.Output == Output {
        Publishers.Merge(self, other)
    }

    /// Combines elements from this publisher with those from two other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher>(
        with b: B, _ c: C
    ) -> Publishers.Merge3<Self, B, C>
    where B.Failure == Failure, B.Output == Output, C.Failure == Failure, C.Output == Output {
        Publishers.Merge3(self, b, c)
    }

    /// Combines elements from this publisher with those from three other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher, D: Publisher>(
        with b: B, _ c: C, _ d: D
    ) -> Publishers.Merge4<Self, B, C, D>
    where B.Failure == Failure, B.Output == Output, C.Failure == Failure, C.Output == Output,
          D.Failure == Failure, D.Output == Output {
        Publishers.Merge4(self, b, c, d)
    }

    /// Combines elements from this publisher with those from another publisher of the same type,
    /// delivering an interleaved sequence of elements.
    ///
    /// As in Combine, merging two publishers of one type makes a `MergeMany`, which further
    /// `merge(with:)` calls extend instead of nesting.
    public func merge(with other: Self) -> Publishers.MergeMany<Self> {
        Publishers.MergeMany(self, other)
    }
}
