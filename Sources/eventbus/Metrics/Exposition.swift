/// Samples read back from Prometheus's text format (0.0.4), for `eventbus top`.
///
/// Only what the host writes needs reading: `name{label="value",…} number` lines, `#` comments
/// skipped, label values with `\\`, `\"` and `\n` escapes.
struct Exposition {
    struct Sample {
        var labels: [String: String]
        var value: Double
    }

    private(set) var samples: [String: [Sample]] = [:]

    init(parsing text: String) {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            if let (name, sample) = Self.sample(line) { samples[name, default: []].append(sample) }
        }
    }

    /// The value of `name` whose labels include `labels`; nil when there is none.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples[name]?.first { sample in labels.allSatisfy { sample.labels[$0.key] == $0.value } }?.value
    }

    /// The label values `label` takes among the samples of `name`, sorted.
    func values(of label: String, in name: String) -> [String] {
        Array(Set((samples[name] ?? []).compactMap { $0.labels[label] })).sorted()
    }

    /// A histogram's cumulative buckets (upper bound, count) for the samples matching `labels`.
    func buckets(_ name: String, _ labels: [String: String]) -> [(bound: Double, count: Double)] {
        (samples[name + "_bucket"] ?? []).compactMap { sample in
            guard labels.allSatisfy({ sample.labels[$0.key] == $0.value }), let le = sample.labels["le"] else { return nil }
            return (le == "+Inf" ? .infinity : Double(le) ?? .infinity, sample.value)
        }.sorted { $0.bound < $1.bound }
    }

    private static func sample(_ line: Substring) -> (String, Sample)? {
        var labels: [String: String] = [:]
        var rest: Substring
        let name: Substring
        if let brace = line.firstIndex(of: "{") {
            name = line[..<brace]
            rest = line[line.index(after: brace)...]
            while let equals = rest.firstIndex(of: "=") {
                let key = rest[..<equals].trimmingPrefix(",")
                rest = rest[rest.index(after: equals)...]
                guard rest.first == "\"" else { return nil }
                rest = rest.dropFirst()
                var value = ""
                var escaped = false
                while let character = rest.first {
                    rest = rest.dropFirst()
                    if escaped {
                        value.append(character == "n" ? "\n" : character)
                        escaped = false
                    } else if character == "\\" {
                        escaped = true
                    } else if character == "\"" {
                        break
                    } else {
                        value.append(character)
                    }
                }
                labels[String(key)] = value
                if rest.first == "}" { break }
            }
            guard let close = rest.firstIndex(of: "}") else { return nil }
            rest = rest[rest.index(after: close)...]
        } else {
            guard let space = line.firstIndex(of: " ") else { return nil }
            name = line[..<space]
            rest = line[space...]
        }
        let fields = rest.split(separator: " ")
        guard let first = fields.first else { return nil }
        let value: Double? = switch first {
        case "+Inf": .infinity
        case "-Inf": -.infinity
        case "NaN": .nan
        default: Double(first)
        }
        guard let value else { return nil }
        return (String(name), Sample(labels: labels, value: value))
    }
}
