import OpenCombine

// Apple Combine's `merge`, which OpenCombine 0.14.0 lacks (its issue #1). Same type names
// (`Merge` … `Merge8`, `MergeMany`), generic parameters and overloads as Combine, so module code
// written against Combine compiles unchanged. All the behaviour lives in `MergeInner`; these types
// only subscribe their upstreams to it, in index order.

extension Publishers {
    /// A publisher created by applying the merge function to two upstream publishers.
    ///
    /// It emits the upstreams' values interleaved, finishes when all have finished, and fails as
    /// soon as one fails (cancelling every upstream). See `MergeInner` for demand and buffering.
    public struct Merge<A: Publisher, B: Publisher>: Publisher
    where A.Failure == B.Failure,
          A.Output == B.Output {
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

        public func merge<Z: Publisher>(
            with z: Z
        ) -> Merge3<A, B, Z>
        where Z.Failure == Failure, Z.Output == Output {
            Merge3(a, b, z)
        }

        public func merge<Z: Publisher, Y: Publisher>(
            with z: Z, _ y: Y
        ) -> Merge4<A, B, Z, Y>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output {
            Merge4(a, b, z, y)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher>(
            with z: Z, _ y: Y, _ x: X
        ) -> Merge5<A, B, Z, Y, X>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output {
            Merge5(a, b, z, y, x)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher, W: Publisher>(
            with z: Z, _ y: Y, _ x: X, _ w: W
        ) -> Merge6<A, B, Z, Y, X, W>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output,
              W.Failure == Failure, W.Output == Output {
            Merge6(a, b, z, y, x, w)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher, W: Publisher, V: Publisher>(
            with z: Z, _ y: Y, _ x: X, _ w: W, _ v: V
        ) -> Merge7<A, B, Z, Y, X, W, V>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output,
              W.Failure == Failure, W.Output == Output,
              V.Failure == Failure, V.Output == Output {
            Merge7(a, b, z, y, x, w, v)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher, W: Publisher, V: Publisher, U: Publisher>(
            with z: Z, _ y: Y, _ x: X, _ w: W, _ v: V, _ u: U
        ) -> Merge8<A, B, Z, Y, X, W, V, U>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output,
              W.Failure == Failure, W.Output == Output,
              V.Failure == Failure, V.Output == Output,
              U.Failure == Failure, U.Output == Output {
            Merge8(a, b, z, y, x, w, v, u)
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

        public func merge<Z: Publisher>(
            with z: Z
        ) -> Merge4<A, B, C, Z>
        where Z.Failure == Failure, Z.Output == Output {
            Merge4(a, b, c, z)
        }

        public func merge<Z: Publisher, Y: Publisher>(
            with z: Z, _ y: Y
        ) -> Merge5<A, B, C, Z, Y>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output {
            Merge5(a, b, c, z, y)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher>(
            with z: Z, _ y: Y, _ x: X
        ) -> Merge6<A, B, C, Z, Y, X>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output {
            Merge6(a, b, c, z, y, x)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher, W: Publisher>(
            with z: Z, _ y: Y, _ x: X, _ w: W
        ) -> Merge7<A, B, C, Z, Y, X, W>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output,
              W.Failure == Failure, W.Output == Output {
            Merge7(a, b, c, z, y, x, w)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher, W: Publisher, V: Publisher>(
            with z: Z, _ y: Y, _ x: X, _ w: W, _ v: V
        ) -> Merge8<A, B, C, Z, Y, X, W, V>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output,
              W.Failure == Failure, W.Output == Output,
              V.Failure == Failure, V.Output == Output {
            Merge8(a, b, c, z, y, x, w, v)
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

        public func merge<Z: Publisher>(
            with z: Z
        ) -> Merge5<A, B, C, D, Z>
        where Z.Failure == Failure, Z.Output == Output {
            Merge5(a, b, c, d, z)
        }

        public func merge<Z: Publisher, Y: Publisher>(
            with z: Z, _ y: Y
        ) -> Merge6<A, B, C, D, Z, Y>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output {
            Merge6(a, b, c, d, z, y)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher>(
            with z: Z, _ y: Y, _ x: X
        ) -> Merge7<A, B, C, D, Z, Y, X>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output {
            Merge7(a, b, c, d, z, y, x)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher, W: Publisher>(
            with z: Z, _ y: Y, _ x: X, _ w: W
        ) -> Merge8<A, B, C, D, Z, Y, X, W>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output,
              W.Failure == Failure, W.Output == Output {
            Merge8(a, b, c, d, z, y, x, w)
        }
    }

    /// A publisher created by applying the merge function to five upstream publishers.
    public struct Merge5<A: Publisher, B: Publisher, C: Publisher, D: Publisher, E: Publisher>: Publisher
    where A.Failure == B.Failure, A.Failure == C.Failure, A.Failure == D.Failure, A.Failure == E.Failure,
          A.Output == B.Output, A.Output == C.Output, A.Output == D.Output, A.Output == E.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B
        public let c: C
        public let d: D
        public let e: E

        public init(_ a: A, _ b: B, _ c: C, _ d: D, _ e: E) {
            self.a = a
            self.b = b
            self.c = c
            self.d = d
            self.e = e
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 5)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
            inner.subscribe(c, at: 2)
            inner.subscribe(d, at: 3)
            inner.subscribe(e, at: 4)
        }

        public func merge<Z: Publisher>(
            with z: Z
        ) -> Merge6<A, B, C, D, E, Z>
        where Z.Failure == Failure, Z.Output == Output {
            Merge6(a, b, c, d, e, z)
        }

        public func merge<Z: Publisher, Y: Publisher>(
            with z: Z, _ y: Y
        ) -> Merge7<A, B, C, D, E, Z, Y>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output {
            Merge7(a, b, c, d, e, z, y)
        }

        public func merge<Z: Publisher, Y: Publisher, X: Publisher>(
            with z: Z, _ y: Y, _ x: X
        ) -> Merge8<A, B, C, D, E, Z, Y, X>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output,
              X.Failure == Failure, X.Output == Output {
            Merge8(a, b, c, d, e, z, y, x)
        }
    }

    /// A publisher created by applying the merge function to six upstream publishers.
    public struct Merge6<A: Publisher, B: Publisher, C: Publisher, D: Publisher, E: Publisher, F: Publisher>: Publisher
    where A.Failure == B.Failure, A.Failure == C.Failure, A.Failure == D.Failure, A.Failure == E.Failure, A.Failure == F.Failure,
          A.Output == B.Output, A.Output == C.Output, A.Output == D.Output, A.Output == E.Output, A.Output == F.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B
        public let c: C
        public let d: D
        public let e: E
        public let f: F

        public init(_ a: A, _ b: B, _ c: C, _ d: D, _ e: E, _ f: F) {
            self.a = a
            self.b = b
            self.c = c
            self.d = d
            self.e = e
            self.f = f
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 6)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
            inner.subscribe(c, at: 2)
            inner.subscribe(d, at: 3)
            inner.subscribe(e, at: 4)
            inner.subscribe(f, at: 5)
        }

        public func merge<Z: Publisher>(
            with z: Z
        ) -> Merge7<A, B, C, D, E, F, Z>
        where Z.Failure == Failure, Z.Output == Output {
            Merge7(a, b, c, d, e, f, z)
        }

        public func merge<Z: Publisher, Y: Publisher>(
            with z: Z, _ y: Y
        ) -> Merge8<A, B, C, D, E, F, Z, Y>
        where Z.Failure == Failure, Z.Output == Output,
              Y.Failure == Failure, Y.Output == Output {
            Merge8(a, b, c, d, e, f, z, y)
        }
    }

    /// A publisher created by applying the merge function to seven upstream publishers.
    public struct Merge7<A: Publisher, B: Publisher, C: Publisher, D: Publisher, E: Publisher, F: Publisher, G: Publisher>: Publisher
    where A.Failure == B.Failure, A.Failure == C.Failure, A.Failure == D.Failure, A.Failure == E.Failure, A.Failure == F.Failure, A.Failure == G.Failure,
          A.Output == B.Output, A.Output == C.Output, A.Output == D.Output, A.Output == E.Output, A.Output == F.Output, A.Output == G.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B
        public let c: C
        public let d: D
        public let e: E
        public let f: F
        public let g: G

        public init(_ a: A, _ b: B, _ c: C, _ d: D, _ e: E, _ f: F, _ g: G) {
            self.a = a
            self.b = b
            self.c = c
            self.d = d
            self.e = e
            self.f = f
            self.g = g
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 7)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
            inner.subscribe(c, at: 2)
            inner.subscribe(d, at: 3)
            inner.subscribe(e, at: 4)
            inner.subscribe(f, at: 5)
            inner.subscribe(g, at: 6)
        }

        public func merge<Z: Publisher>(
            with z: Z
        ) -> Merge8<A, B, C, D, E, F, G, Z>
        where Z.Failure == Failure, Z.Output == Output {
            Merge8(a, b, c, d, e, f, g, z)
        }
    }

    /// A publisher created by applying the merge function to eight upstream publishers.
    public struct Merge8<A: Publisher, B: Publisher, C: Publisher, D: Publisher, E: Publisher, F: Publisher, G: Publisher, H: Publisher>: Publisher
    where A.Failure == B.Failure, A.Failure == C.Failure, A.Failure == D.Failure, A.Failure == E.Failure, A.Failure == F.Failure, A.Failure == G.Failure, A.Failure == H.Failure,
          A.Output == B.Output, A.Output == C.Output, A.Output == D.Output, A.Output == E.Output, A.Output == F.Output, A.Output == G.Output, A.Output == H.Output {
        public typealias Output = A.Output
        public typealias Failure = A.Failure

        public let a: A
        public let b: B
        public let c: C
        public let d: D
        public let e: E
        public let f: F
        public let g: G
        public let h: H

        public init(_ a: A, _ b: B, _ c: C, _ d: D, _ e: E, _ f: F, _ g: G, _ h: H) {
            self.a = a
            self.b = b
            self.c = c
            self.d = d
            self.e = e
            self.f = f
            self.g = g
            self.h = h
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            let inner = MergeInner(downstream: subscriber, upstreamCount: 8)
            inner.start()
            inner.subscribe(a, at: 0)
            inner.subscribe(b, at: 1)
            inner.subscribe(c, at: 2)
            inner.subscribe(d, at: 3)
            inner.subscribe(e, at: 4)
            inner.subscribe(f, at: 5)
            inner.subscribe(g, at: 6)
            inner.subscribe(h, at: 7)
        }
    }
}

extension Publishers.Merge: Equatable
where A: Equatable, B: Equatable {}
extension Publishers.Merge3: Equatable
where A: Equatable, B: Equatable, C: Equatable {}
extension Publishers.Merge4: Equatable
where A: Equatable, B: Equatable, C: Equatable, D: Equatable {}
extension Publishers.Merge5: Equatable
where A: Equatable, B: Equatable, C: Equatable, D: Equatable, E: Equatable {}
extension Publishers.Merge6: Equatable
where A: Equatable, B: Equatable, C: Equatable, D: Equatable, E: Equatable, F: Equatable {}
extension Publishers.Merge7: Equatable
where A: Equatable, B: Equatable, C: Equatable, D: Equatable, E: Equatable, F: Equatable, G: Equatable {}
extension Publishers.Merge8: Equatable
where A: Equatable, B: Equatable, C: Equatable, D: Equatable, E: Equatable, F: Equatable, G: Equatable, H: Equatable {}

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
    where B.Failure == Failure, B.Output == Output,
          C.Failure == Failure, C.Output == Output {
        Publishers.Merge3(self, b, c)
    }

    /// Combines elements from this publisher with those from three other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher, D: Publisher>(
        with b: B, _ c: C, _ d: D
    ) -> Publishers.Merge4<Self, B, C, D>
    where B.Failure == Failure, B.Output == Output,
          C.Failure == Failure, C.Output == Output,
          D.Failure == Failure, D.Output == Output {
        Publishers.Merge4(self, b, c, d)
    }

    /// Combines elements from this publisher with those from four other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher, D: Publisher, E: Publisher>(
        with b: B, _ c: C, _ d: D, _ e: E
    ) -> Publishers.Merge5<Self, B, C, D, E>
    where B.Failure == Failure, B.Output == Output,
          C.Failure == Failure, C.Output == Output,
          D.Failure == Failure, D.Output == Output,
          E.Failure == Failure, E.Output == Output {
        Publishers.Merge5(self, b, c, d, e)
    }

    /// Combines elements from this publisher with those from five other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher, D: Publisher, E: Publisher, F: Publisher>(
        with b: B, _ c: C, _ d: D, _ e: E, _ f: F
    ) -> Publishers.Merge6<Self, B, C, D, E, F>
    where B.Failure == Failure, B.Output == Output,
          C.Failure == Failure, C.Output == Output,
          D.Failure == Failure, D.Output == Output,
          E.Failure == Failure, E.Output == Output,
          F.Failure == Failure, F.Output == Output {
        Publishers.Merge6(self, b, c, d, e, f)
    }

    /// Combines elements from this publisher with those from six other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher, D: Publisher, E: Publisher, F: Publisher, G: Publisher>(
        with b: B, _ c: C, _ d: D, _ e: E, _ f: F, _ g: G
    ) -> Publishers.Merge7<Self, B, C, D, E, F, G>
    where B.Failure == Failure, B.Output == Output,
          C.Failure == Failure, C.Output == Output,
          D.Failure == Failure, D.Output == Output,
          E.Failure == Failure, E.Output == Output,
          F.Failure == Failure, F.Output == Output,
          G.Failure == Failure, G.Output == Output {
        Publishers.Merge7(self, b, c, d, e, f, g)
    }

    /// Combines elements from this publisher with those from seven other publishers, delivering an
    /// interleaved sequence of elements.
    public func merge<B: Publisher, C: Publisher, D: Publisher, E: Publisher, F: Publisher, G: Publisher, H: Publisher>(
        with b: B, _ c: C, _ d: D, _ e: E, _ f: F, _ g: G, _ h: H
    ) -> Publishers.Merge8<Self, B, C, D, E, F, G, H>
    where B.Failure == Failure, B.Output == Output,
          C.Failure == Failure, C.Output == Output,
          D.Failure == Failure, D.Output == Output,
          E.Failure == Failure, E.Output == Output,
          F.Failure == Failure, F.Output == Output,
          G.Failure == Failure, G.Output == Output,
          H.Failure == Failure, H.Output == Output {
        Publishers.Merge8(self, b, c, d, e, f, g, h)
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
