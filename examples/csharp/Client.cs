// A volley client in C#, through volley-ffi with P/Invoke: the route a Unity or Godot .NET
// game takes. It connects to an arena server, steers its avatar, decodes the snapshots and
// reads the arena's reliable messages, and predicts its own avatar (Prediction, below).
//
//   cargo build -p volley-ffi
//   mcs -out:client.exe examples/csharp/Client.cs
//   volley schema > arena.json
//   volley token --private-key KEY --client-id 1 --server 127.0.0.1:40000 --out token.bin
//   LD_LIBRARY_PATH=target/debug mono client.exe token.bin arena.json 5 [seen.txt]
//
// It plays SECONDS seconds at 60 frames a second. For each new snapshot it writes the
// avatars exactly as that snapshot holds them ("tick T", then a line per avatar: id and its
// numbers) to the fourth argument's file, if given. It exits 0 when it was connected,
// decoded snapshots and was welcomed by the arena; 1 otherwise.
using System;
using System.Globalization;
using System.IO;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;

static class Volley
{
    const string Lib = "volley_ffi";
    public const int Ok = 0, ErrHandle = -2, Connected = 1, Ended = 2, Resuming = 3;

    [StructLayout(LayoutKind.Sequential)]
    public struct Stats
    {
        public double RttMs, Loss;
        public ulong Snapshots, SnapshotErrors, BytesReceived, FramesInterpolated, FramesExtrapolated;
        public double RenderDelayTicks, JitterMs, RenderDelayMs;
    }

    [DllImport(Lib)] public static extern UIntPtr volley_last_error(byte[] buf, UIntPtr capacity);
    [DllImport(Lib)] public static extern int volley_client_new(byte[] token, UIntPtr tokenLen, byte[] schemaJson, byte[] bind, out ulong client);
    [DllImport(Lib)] public static extern int volley_client_free(ulong client);
    [DllImport(Lib)] public static extern int volley_client_poll(ulong client, byte[] input, UIntPtr inputLen);
    [DllImport(Lib)] public static extern int volley_client_status(ulong client);
    [DllImport(Lib)] public static extern int volley_client_index(ulong client, out uint index);
    [DllImport(Lib)] public static extern int volley_client_kind(ulong client, byte[] name, out ushort kind, out uint values);
    [DllImport(Lib)] public static extern int volley_client_entities(ulong client, ushort kind, uint[] ids, double[] values, UIntPtr capacity, out UIntPtr count);
    [DllImport(Lib)] public static extern int volley_client_latest_tick(ulong client, out uint tick);
    [DllImport(Lib)] public static extern int volley_client_snapshot_entities(ulong client, uint tick, ushort kind, uint[] ids, double[] values, UIntPtr capacity, out UIntPtr count);
    [DllImport(Lib)] public static extern int volley_client_next_message(ulong client, byte[] buf, UIntPtr capacity, out UIntPtr len, [MarshalAs(UnmanagedType.U1)] out bool reliable);
    [DllImport(Lib)] public static extern int volley_client_stats(ulong client, out Stats stats);
    [DllImport(Lib)] public static extern int volley_client_input_seq(ulong client, out uint seq);
    [DllImport(Lib)] public static extern int volley_client_applied_input(ulong client, uint tick, out uint seq);
    [DllImport(Lib)] public static extern int volley_client_own_entity(ulong client, out uint id);
    [DllImport(Lib)] public static extern int volley_client_rebind(ulong client, int resumeNow);
    [DllImport(Lib)] public static extern int volley_client_resumes(ulong client, out uint resumes);

    public static string LastError()
    {
        var buf = new byte[512];
        volley_last_error(buf, (UIntPtr)buf.Length);
        int n = Array.IndexOf(buf, (byte)0);
        return Encoding.UTF8.GetString(buf, 0, n >= 0 ? n : buf.Length);
    }

    public static byte[] CString(string s) => Encoding.UTF8.GetBytes(s + "\0");
}

// The own avatar, predicted. The arena moves an avatar by its newest input each tick (Speed
// metres a second, inside the walls); this client sends one input a frame, so it applies each
// input at once. Each new snapshot reconciles: its position of the own entity, with the inputs
// the server had not yet applied replayed on it; what that moves the prediction by is a
// correction.
class Prediction
{
    const double Speed = 8.0, HalfSize = 50.0;
    const int History = 128;
    readonly uint[] seqs = new uint[History];
    readonly double[] dxs = new double[History], dys = new double[History];
    double x, y;
    bool have;
    public long Reconciled, Corrections;
    public double Corrected;

    static double Clamp(double v) => Math.Max(-(HalfSize - 0.5), Math.Min(HalfSize - 0.5, v));

    static void Step(ref double x, ref double y, double dx, double dy)
    {
        x = Clamp(x + dx * Speed / 60.0);
        y = Clamp(y + dy * Speed / 60.0);
    }

    public void Sent(uint seq, int moveX, int moveY)
    {
        double dx = moveX / 127.0, dy = moveY / 127.0, len = Math.Sqrt(dx * dx + dy * dy);
        if (len > 1.0) { dx /= len; dy /= len; }
        seqs[seq % History] = seq;
        dxs[seq % History] = dx;
        dys[seq % History] = dy;
        if (have) Step(ref x, ref y, dx, dy);
    }

    public void Reconcile(double sx, double sy, uint? applied, uint newest)
    {
        uint from = applied.HasValue ? applied.Value + 1 : newest - History + 1;
        for (uint s = from; (int)(newest - s) >= 0; s++)
            if (seqs[s % History] == s) Step(ref sx, ref sy, dxs[s % History], dys[s % History]);
        if (have)
        {
            double e = Math.Sqrt((sx - x) * (sx - x) + (sy - y) * (sy - y));
            Corrected += e;
            if (e > 0.01) Corrections++;
        }
        x = sx;
        y = sy;
        have = true;
        Reconciled++;
    }
}

static class Program
{
    // The arena's input as postcard writes its ArenaInput: two signed bytes, the aim as a
    // varint (a 65536th of a turn), then fire and rail as bytes.
    static byte[] ArenaInput(int moveX, int moveY, uint aim, bool fire)
    {
        var o = new MemoryStream();
        o.WriteByte((byte)(sbyte)moveX);
        o.WriteByte((byte)(sbyte)moveY);
        do
        {
            byte b = (byte)(aim & 0x7f);
            aim >>= 7;
            o.WriteByte(aim != 0 ? (byte)(b | 0x80) : b);
        } while (aim != 0);
        o.WriteByte(fire ? (byte)1 : (byte)0);
        o.WriteByte(0);
        return o.ToArray();
    }

    // The varints of a postcard message, in order.
    static uint[] Varints(byte[] m, int len)
    {
        var list = new System.Collections.Generic.List<uint>();
        uint v = 0;
        int shift = 0;
        for (int i = 0; i < len && shift < 35; i++)
        {
            v |= (uint)(m[i] & 0x7f) << shift;
            shift += 7;
            if ((m[i] & 0x80) == 0) { list.Add(v); v = 0; shift = 0; }
        }
        return list.ToArray();
    }

    static int Main(string[] args)
    {
        if (args.Length < 3)
        {
            Console.Error.WriteLine("usage: client.exe TOKEN_FILE SCHEMA_FILE SECONDS [SEEN_OUT]");
            return 2;
        }
        byte[] token = File.ReadAllBytes(args[0]);
        byte[] schema = Volley.CString(File.ReadAllText(args[1]));
        int seconds = int.Parse(args[2]);
        var output = args.Length > 3 ? new StreamWriter(args[3]) : null;
        var inv = CultureInfo.InvariantCulture;

        if (Volley.volley_client_new(token, (UIntPtr)token.Length, schema, null, out ulong client) != Volley.Ok)
        {
            Console.Error.WriteLine("volley_client_new: " + Volley.LastError());
            return 1;
        }
        if (Volley.volley_client_kind(client, Volley.CString("Avatar"), out ushort kind, out uint per) != Volley.Ok)
        {
            Console.Error.WriteLine("volley_client_kind: " + Volley.LastError());
            return 1;
        }
        const int cap = 256;
        var ids = new uint[cap];
        var values = new double[cap * per];
        var message = new byte[1024];
        bool connected = false, welcomed = false;
        uint me = 0;
        uint? lastTick = null;
        int snapshots = 0, drawn = 0;
        var prediction = new Prediction();
        uint meBeforeRebind = 0;
        int resumingFrames = 0; // frames the library said it was resuming (the game's "reconnecting…")
        for (int f = 0; f < seconds * 60; f++)
        {
            // Half way: the socket moves to a new port, as a NAT rebinding moves a player;
            // untold, the library hears a second of silence and resumes with its ticket.
            if (f == seconds * 30 && connected)
            {
                meBeforeRebind = me;
                if (Volley.volley_client_rebind(client, 0) < 0) Console.Error.WriteLine("volley_client_rebind: " + Volley.LastError());
            }
            double a = f * 0.05;
            uint aim = (uint)((a / (2 * Math.PI)) % 1.0 * 65536) & 0xffff;
            int moveX = (int)(Math.Cos(a) * 127), moveY = (int)(Math.Sin(a) * 127);
            byte[] input = ArenaInput(moveX, moveY, aim, f % 30 == 0);
            bool had = Volley.volley_client_input_seq(client, out uint before) == 1;
            int rc = Volley.volley_client_poll(client, input, (UIntPtr)input.Length);
            if (rc < 0) { Console.Error.WriteLine("volley_client_poll: " + Volley.LastError()); break; }
            snapshots += rc;
            // The input went out (once connected): predicted at once.
            if (Volley.volley_client_input_seq(client, out uint seq) == 1 && (!had || seq != before))
                prediction.Sent(seq, moveX, moveY);
            int status = Volley.volley_client_status(client);
            if (status == Volley.Connected && !connected)
            {
                connected = true;
                Volley.volley_client_index(client, out me);
                Console.WriteLine("connected as player " + me);
            }
            if (status == Volley.Resuming) resumingFrames++;
            if (status == Volley.Ended) { Console.WriteLine("ended"); break; }
            // The arena's messages: variant 1 is a welcome (player id), 0 a kill.
            while (Volley.volley_client_next_message(client, message, (UIntPtr)message.Length, out UIntPtr len, out bool reliable) == 1)
            {
                uint[] fields = Varints(message, (int)len);
                if (fields.Length >= 2 && fields[0] == 1)
                {
                    Console.WriteLine("welcome: player " + fields[1] + " (reliable " + (reliable ? 1 : 0) + ")");
                    welcomed = reliable && fields[1] == me;
                }
            }
            if (Volley.volley_client_latest_tick(client, out uint tick) == 1 && tick != lastTick)
            {
                lastTick = tick;
                bool held = Volley.volley_client_snapshot_entities(client, tick, kind, ids, values, (UIntPtr)cap, out UIntPtr count) == 1;
                if (held && Volley.volley_client_own_entity(client, out uint own) == 1 && Volley.volley_client_input_seq(client, out uint newest) == 1)
                {
                    uint? applied = Volley.volley_client_applied_input(client, tick, out uint done) == 1 ? done : (uint?)null;
                    for (int i = 0; i < (int)count; i++)
                        if (ids[i] == own) prediction.Reconcile(values[i * per], values[i * per + 1], applied, newest);
                }
                if (held && output != null)
                {
                    output.WriteLine("tick " + tick);
                    for (int i = 0; i < (int)count; i++)
                    {
                        var line = new StringBuilder(ids[i].ToString(inv));
                        for (int v = 0; v < per; v++) line.Append(' ').Append(values[i * per + v].ToString("R", inv));
                        output.WriteLine(line.ToString());
                    }
                }
            }
            if (Volley.volley_client_entities(client, kind, ids, values, (UIntPtr)cap, out UIntPtr drawnCount) == Volley.Ok && (int)drawnCount > 0)
                drawn++;
            Thread.Sleep(16);
        }
        Volley.volley_client_resumes(client, out uint resumes);
        Volley.volley_client_index(client, out uint meAfter);
        Console.WriteLine("resumes " + resumes + ", player " + meBeforeRebind + " before the rebind and " + meAfter + " after, " + resumingFrames + " frames resuming");
        Volley.volley_client_stats(client, out Volley.Stats stats);
        Console.WriteLine("snapshots " + snapshots + " (decoded " + stats.Snapshots + ", errors " + stats.SnapshotErrors + "), frames drawn " + drawn);
        double mean = prediction.Reconciled > 0 ? prediction.Corrected / prediction.Reconciled : 0.0;
        Console.WriteLine(string.Format(inv, "prediction: {0} reconciled, {1} corrections, mean {2:F4} m; jitter {3:F2} ms, render delay {4:F1} ms",
            prediction.Reconciled, prediction.Corrections, mean, stats.JitterMs, stats.RenderDelayMs));
        Volley.volley_client_free(client);
        if (Volley.volley_client_status(client) != Volley.ErrHandle) { Console.WriteLine("a freed handle was not refused"); return 1; }
        output?.Close();
        bool ok = connected && snapshots >= 30 && welcomed && drawn > 0 && prediction.Reconciled >= 30;
        Console.WriteLine(ok ? "ok" : "FAILED");
        return ok ? 0 : 1;
    }
}
