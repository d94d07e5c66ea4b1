import EventBusKit
import Testing

@Test func combineIsReExported() {
    let subject = PassthroughSubject<Int, Never>()
    var got: [Int] = []
    let c = subject.sink { got.append($0) }
    subject.send(1)
    c.cancel()
    #expect(got == [1])
}
