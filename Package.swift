// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "EventBus",
    products: [
        .executable(name: "eventbus-bench", targets: ["eventbus-bench"]),
        .executable(name: "eventbus", targets: ["eventbus"]),
        // The example handler modules, built here as well as by their own packages in plugins/
        // (route 2 of DESIGN.md §3: they share this build and link the one libEventBusKit.so).
        .library(name: "Hello", type: .dynamic, targets: ["Hello"]),
        .library(name: "Follower", type: .dynamic, targets: ["Follower"]),
        .library(name: "RateSummary", type: .dynamic, targets: ["RateSummary"]),
    ],
    dependencies: [
        // The SDK is a nested package so SwiftPM links everything here against its one dynamic
        // library instead of static copies (DESIGN.md §3).
        .package(path: "plugins/EventBusKit"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        .executableTarget(
            name: "eventbus-bench",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]
        ),
        .executableTarget(
            name: "eventbus",
            dependencies: [.product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .target(
            name: "Hello",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/hello/Sources/Hello"
        ),
        .target(
            name: "Follower",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/follower/Sources/Follower"
        ),
        .target(
            name: "RateSummary",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/rate-summary/Sources/RateSummary"
        ),
        .testTarget(
            name: "EventBusKitTests",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]
        ),
        // Loads the built example modules with dlopen, as the host does, and builds a module
        // package and a scaffold the way an outside author would.
        .testTarget(
            name: "EventBusModulesTests",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]
        ),
    ]
)
