import ControlProtocol
import EventBusKit
import ModuleIsolation

extension ExecLineFormat {
    /// An exec module's lines as the control socket makes them: an event is its `eventbus tail
    /// --json` line (``EventJSON``), a field match means what `eventbus tail FIELD=VALUE` means
    /// (``TailFilter``).
    static let host = ExecLineFormat(
        makeEncoder: {
            var json = EventJSON()
            var writer = JSONWriter(capacity: 0)
            return { event, bytes in
                swap(&writer.bytes, &bytes)
                json.event(event, into: &writer)
                swap(&writer.bytes, &bytes)
            }
        },
        makeFilter: { matches in
            var filter = TailFilter()
            for (field, values) in matches {
                var match = FieldMatch()
                for value in values { match.add(value) }
                filter.matches[field] = match
            }
            return { [filter] event in filter.accepts(event) }
        })
}
