// swift-tools-version:6.0
// The `hello` handler module as its own package: how an author outside this repo builds a module
// (route 1 of docs/platform-facts.md, Loading modules). The root package builds the same sources as `libHello.so` too.
import PackageDescription

let package = Package(
    name: "hello",
    products: [
        .library(name: "Hello", type: .dynamic, targets: ["Hello"]),
    ],
    dependencies: [
        // Only the SDK product, never OpenCombine: a second copy of either breaks every cast
        // between the host and the module.
        .package(path: "../EventBusKit"),
    ],
    targets: [
        .target(name: "Hello", dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]),
    ]
)
