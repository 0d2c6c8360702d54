import Testing
import VigilForeign

/// Munin's plugin protocol as VigilForeign reads it: config and fetch
/// output, the rates RRD stores for each field type, warning and critical,
/// and munin-node's plugin-conf.d.
@Suite struct MuninFormatTests {
    func parse(_ text: String, plugin: String = "p") -> Munin.Output { Munin.parse(Array(text.utf8), plugin: plugin) }

    @Test func configAndFetchReadAlike() {
        let config = parse("""
            graph_title CPU usage
            graph_args --base 1000 -r --lower-limit 0
            graph_vlabel %
            graph_category system
            user.label user
            user.type DERIVE
            user.min 0
            user.warning 80
            idle.label idle #not a comment: the rest of the value
              system.label system\t
            """, plugin: "cpu")
        #expect(config.errors == [])
        let graph = try! #require(config.graph("cpu"))
        #expect(graph.attributes["graph_title"] == "CPU usage")
        #expect(graph.attributes["graph_args"] == "--base 1000 -r --lower-limit 0")
        #expect(graph.fields.map(\.name) == ["user", "idle", "system"])
        #expect(graph.field("user")?.type == .derive && graph.field("user")?.min == 0 && graph.field("idle")?.type == .gauge)
        #expect(graph.field("system")?.label == "system")
        let fetch = parse("user.value 4762030\nidle.value U\nsystem.value 1700000000:12.5\n", plugin: "cpu")
        #expect(fetch.errors == [])
        #expect(fetch.graph("cpu")?.field("user")?.value == .number(4762030, time: nil, whole: 4762030))
        #expect(fetch.graph("cpu")?.field("idle")?.value == .unknown)
        #expect(fetch.graph("cpu")?.field("system")?.value == .number(12.5, time: 1_700_000_000))
    }

    @Test func multigraphSectionsAndDirtyValues() {
        let out = parse("""
            multigraph netstat
            graph_title TCP
            active.label active
            active.value 10
            multigraph netstat.established
            established.label established
            established.value 3
            multigraph netstat
            passive.value 4
            """, plugin: "netstat")
        #expect(out.graphs.map(\.name) == ["netstat", "netstat.established"])
        #expect(out.graph("netstat")?.fields.map(\.name) == ["active", "passive"])
        #expect(out.graph("netstat.established")?.field("established")?.value == .number(3, time: nil, whole: 3))
        // Before any multigraph line, the plugin's own graph.
        let mixed = parse("a.value 1\nmultigraph other\nb.value 2\n", plugin: "mine")
        #expect(mixed.graphs.map(\.name) == ["mine", "other"])
    }

    @Test func fieldNamesAreCleanedAsMuninCleansThem() {
        let out = parse("/dev/vda.value 27.8\n9lives.value 1\nok_name.value 2\n")
        #expect(out.graph("p")?.fields.map(\.name) == ["_dev_vda", "_lives", "ok_name"])
    }

    @Test func badLinesAreCountedByLineAndTheRestRead() {
        let out = parse("""
            a.value 1
            b.value twelve
            just-a-word
            c.value 0x10
            multigraph bad name!
            d.value 4
            multigraph fine
            e.value 1e3
            f.value inf
            \(String(repeating: "x", count: 256))a.value 1
            \(String(repeating: "x", count: 256))b.value 2
            """)
        #expect(out.graph("p")?.field("a")?.value == .number(1, time: nil, whole: 1))
        #expect(out.graph("p")?.field("b")?.value == .unknown)
        #expect(out.graph("fine")?.field("e")?.value == .number(1000, time: nil))
        #expect(out.graph("p")?.field("d") == nil, "a refused section's lines are dropped")
        #expect(out.errors.count == 7, "\(out.errors)")
        #expect(out.errors[0].hasPrefix("line 2:") && out.errors[1].hasPrefix("line 3:") && out.errors[2].hasPrefix("line 4:"))
        #expect(out.errors[3].hasPrefix("line 5:") && out.errors[4].hasPrefix("line 9:"))
        // Names past 255 bytes are refused, not cut into one field.
        #expect(out.errors[5].hasPrefix("line 10: the field name") && out.errors[6].hasPrefix("line 11:"))
        #expect(out.graph("fine")?.fields.map(\.name) == ["e", "f"])
    }

    @Test func aFloodOfGraphsAndFieldsIsBounded() {
        var text = ""
        for i in 0..<1_500 { text += "multigraph g\(i)\nf.value 1\n" }
        let out = parse(text)
        #expect(out.graphs.count == Munin.maxGraphs)
        #expect(out.errors.last?.contains("dropped") == true)
        let fields = parse((0..<20_000).map { "f\($0).value 1\n" }.joined())
        #expect(fields.graphs[0].fields.count == Munin.maxFields)
        let bytes = [UInt8]((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
        _ = Munin.parse(bytes, plugin: "p")  // never traps
    }

    // MARK: rates

    @Test func gaugeIsTheValueAndCountersTheirChangePerSecond() {
        var gauge = Munin.Rate()
        #expect(gauge.sample(.number(5, time: nil), at: 0, type: .gauge, min: nil, max: nil) == .success(5))
        var derive = Munin.Rate()
        #expect(derive.sample(.number(100, time: nil), at: 1_000_000_000, type: .derive, min: 0, max: nil) == .failure(.init(gap: .first)))
        #expect(derive.sample(.number(400, time: nil), at: 4_000_000_000, type: .derive, min: 0, max: nil) == .success(100))
        // A DERIVE with min 0 that went down (a reset) is discarded, as RRD discards it.
        #expect(derive.sample(.number(10, time: nil), at: 5_000_000_000, type: .derive, min: 0, max: nil) == .failure(.init(gap: .range)))
        #expect(derive.sample(.number(30, time: nil), at: 7_000_000_000, type: .derive, min: 0, max: nil) == .success(10))
        // Without min, a DERIVE may fall.
        var free = Munin.Rate()
        _ = free.sample(.number(30, time: nil), at: 0, type: .derive, min: nil, max: nil)
        #expect(free.sample(.number(10, time: nil), at: 2_000_000_000, type: .derive, min: nil, max: nil) == .success(-10))
        // The value's own time wins over the run's.
        var own = Munin.Rate()
        _ = own.sample(.number(0, time: 100), at: 999_000_000_000, type: .derive, min: nil, max: nil)
        #expect(own.sample(.number(50, time: 110), at: 999_000_000_000, type: .derive, min: nil, max: nil) == .success(5))
        #expect(own.sample(.number(60, time: 110), at: 999_000_000_000, type: .derive, min: nil, max: nil) == .failure(.init(gap: .time)))
    }

    @Test func counterWrapsAt32And64BitsAndAResetIsNoRate() {
        var c = Munin.Rate()
        _ = c.sample(.number(4_294_967_000, time: nil), at: 0, type: .counter, min: nil, max: nil)
        #expect(c.sample(.number(704, time: nil), at: 1_000_000_000, type: .counter, min: nil, max: nil) == .success(1000))
        var big = Munin.Rate()
        _ = big.sample(.number(18_446_744_073_709_000_000, time: nil), at: 0, type: .counter, min: nil, max: nil)
        if case .success(let rate) = big.sample(.number(448_384, time: nil), at: 1_000_000_000, type: .counter, min: nil, max: nil) {
            #expect(abs(rate - 1_000_000) < 5_000, "\(rate)")  // a double's precision at 2^64
        } else {
            Issue.record("a 64-bit wrap gave no rate")
        }
        // Written as integers, the change is exact, as RRD takes it on the digits.
        func value(_ text: Substring) -> Munin.Value { Munin.Value(text: text)! }
        var exact = Munin.Rate()
        _ = exact.sample(value("18446744073709000000"), at: 0, type: .counter, min: nil, max: nil)
        #expect(exact.sample(value("448384"), at: 1_000_000_000, type: .counter, min: nil, max: nil) == .success(1_000_000))
        var near = Munin.Rate()
        _ = near.sample(value("1000000000000000001"), at: 0, type: .derive, min: nil, max: nil)
        #expect(near.sample(value("1000000000000000003"), at: 1_000_000_000, type: .derive, min: nil, max: nil) == .success(2))
        #expect(near.sample(value("-9223372036854775808"), at: 2_000_000_000, type: .derive, min: nil, max: nil)
                == .success(-10_223_372_036_854_775_811))
        var wide = Munin.Rate()
        _ = wide.sample(value("1000000000000000000000"), at: 0, type: .derive, min: nil, max: nil)
        #expect(wide.sample(value("1000000000000000000002"), at: 1_000_000_000, type: .derive, min: nil, max: nil) == .success(2))
        // A COUNTER that falls from past 2^64: a reset, not a negative rate.
        var past = Munin.Rate()
        _ = past.sample(value("30000000000000000005"), at: 0, type: .counter, min: nil, max: nil)
        #expect(past.sample(value("1"), at: 1_000_000_000, type: .counter, min: nil, max: nil) == .failure(.init(gap: .reset)))
        var reset = Munin.Rate()
        _ = reset.sample(.number(1_000_000, time: nil), at: 0, type: .counter, min: nil, max: nil)
        #expect(reset.sample(.number(10, time: nil), at: 1_000_000_000, type: .counter, min: nil, max: nil) == .failure(.init(gap: .reset)))
        #expect(reset.sample(.number(20, time: nil), at: 2_000_000_000, type: .counter, min: nil, max: nil) == .success(10))
    }

    @Test func absoluteUnknownAndMax() {
        var a = Munin.Rate()
        _ = a.sample(.number(0, time: nil), at: 0, type: .absolute, min: nil, max: nil)
        #expect(a.sample(.number(60, time: nil), at: 30_000_000_000, type: .absolute, min: nil, max: nil) == .success(2))
        #expect(a.sample(.unknown, at: 40_000_000_000, type: .absolute, min: nil, max: nil) == .failure(.init(gap: .unknown)))
        // After U a counter starts over.
        #expect(a.sample(.number(5, time: nil), at: 50_000_000_000, type: .absolute, min: nil, max: nil) == .failure(.init(gap: .first)))
        var g = Munin.Rate()
        #expect(g.sample(.number(101, time: nil), at: 0, type: .gauge, min: 0, max: 100) == .failure(.init(gap: .range)))
    }

    @Test func warningAndCriticalRanges() {
        #expect(Munin.Limit("80")?.high == 80 && Munin.Limit("80")?.low == nil)
        #expect(Munin.Limit("10:") != nil && Munin.Limit(":5") != nil && Munin.Limit("1:2") != nil)
        #expect(Munin.Limit("x") == nil && Munin.Limit(":") == nil && Munin.Limit("1:y") == nil)
        #expect(Munin.level(of: 85, warning: "80", critical: "90") == "warning")
        #expect(Munin.level(of: 95, warning: "80", critical: "90") == "critical")
        #expect(Munin.level(of: 5, warning: "10:", critical: nil) == "warning")
        #expect(Munin.level(of: 50, warning: "10:90", critical: "5:95") == "ok")
    }

    // MARK: cdef

    @Test func cdefIsRrdtoolsRPN() {
        let fields: [String: Double?] = ["down": 1000, "client_req": 200, "cache_hit": 50, "gone": nil]
        func eval(_ cdef: String) -> Munin.CdefResult { Munin.evaluate(cdef: cdef, value: { fields[$0] }) }
        #expect(eval("down,8,*") == .value(8000))
        #expect(eval("cache_hit,client_req,/,100,*") == .value(25))
        #expect(eval("uptime_s,86400,/") == .invalid("'uptime_s' is neither a number, an operator nor a field of the graph"))
        #expect(eval("gone,8,*") == .unknown)
        #expect(eval("gone,UN,0,gone,IF") == .value(0))
        #expect(eval("down,0,500,LIMIT") == .unknown && eval("down,0,5000,LIMIT") == .value(1000))
        #expect(eval("gone,down,ADDNAN") == .value(1000))
        #expect(eval("1,2,EXC,-") == .value(1) && eval("3,DUP,*") == .value(9) && eval("1,2,POP") == .value(1))
        #expect(eval("down,0,/") == .value(.infinity))
        #expect(eval("1,+") == .invalid("+ needs 2 values on the stack"))
        #expect(eval("1,2") == .invalid("leaves 2 values on the stack, not 1"))
        #expect(eval(Array(repeating: "1", count: 300).joined(separator: ",")) == .invalid("more than 256 tokens, or none"))
        #expect(eval("-1.5e1,ABS") == .value(15))
    }

    // MARK: plugin-conf.d

    @Test func pluginConfSectionsWildcardsAndPrecedence() {
        var conf = Munin.PluginConf()
        conf.read("""
            # Debian's own
            [if_*]
            user root

            [if_err_*]
            user nobody
            env.a from-if_err

            [df*]
            env.warning 92
            env.exclude_re ^/run/user  # a comment
            env.hash has \\# a hash

            [*_eth0]
            env.b suffix

            [exim_mailqueue]
            group adm, (Debian-exim)
            timeout 30
            command sudo -u mail %c
            """, file: "/etc/munin/plugin-conf.d/munin-node")
        conf.read("[df]\nenv.warning 95\n", file: "/etc/munin/plugin-conf.d/zz-local")
        #expect(conf.errors == [])
        #expect(conf.settings(for: "if_eth0").user == "root")
        #expect(conf.settings(for: "if_err_eth0").user == "nobody", "if_err_* sorts after if_*, so it wins")
        #expect(conf.settings(for: "if_err_eth0").env == ["a": "from-if_err", "b": "suffix"])
        #expect(conf.settings(for: "df").env == ["warning": "95", "exclude_re": "^/run/user", "hash": "has # a hash"])
        #expect(conf.settings(for: "df_inode").env["warning"] == "92")
        let exim = conf.settings(for: "exim_mailqueue")
        #expect(exim.groups == ["adm", "(Debian-exim)"] && exim.timeout == "30" && exim.command == ["sudo", "-u", "mail", "%c"])
        #expect(conf.settings(for: "cpu") == Munin.PluginConf.Section())
    }

    @Test func pluginConfErrorsSayWhereAndKeepWhatCameBefore() {
        var conf = Munin.PluginConf()
        conf.read("[a]\nenv.x 1\n  env y=2\nenv.z 3\n", file: "f1")
        conf.read("user root\n", file: "f2")
        conf.read("[b]\n\tbogus thing\n", file: "f3")
        conf.read("[c]\nuser\n", file: "f4")
        #expect(conf.settings(for: "a").env == ["x": "1"])
        #expect(conf.errors.count == 4, "\(conf.errors)")
        #expect(conf.errors[0].hasPrefix("f1:3:3: 'env y=2' is the old form"))
        #expect(conf.errors[1].hasPrefix("f2:1:1: a setting before any [section]"))
        #expect(conf.errors[2].hasPrefix("f3:2:2: 'bogus' is not a setting"))
        #expect(conf.errors[3].hasPrefix("f4:2:1: 'user' has no value"))
    }
}
