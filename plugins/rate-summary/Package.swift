// swift-tools-version:6.0
// The `rate-summary` handler module as its own package (route 1 of docs/platform-facts.md, Loading modules). The root
// package builds the same sources as `libRateSummary.so` too.
import PackageDescription

let package = Package(
    name: "rate-summary",
    products: [
        .library(name: "RateSummary", type: .dynamic, targets: ["RateSummary"]),
    ],
    dependencies: [
        // Only the SDK product, never OpenCombine: a second copy of either breaks every cast
        // between the host and the module.
        .package(path: "../EventBusKit"),
    ],
    targets: [
        .target(name: "RateSummary", dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]),
    ]
)
