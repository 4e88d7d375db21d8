// The check that the libkiln loaded has the ABI this assembly was generated for.
using System;
using System.Runtime.CompilerServices;

namespace Kiln
{
    internal static unsafe partial class NativeMethods
    {
        // Runs before the first call into libkiln runs: a library of another ABI
        // fails every call (TypeInitializationException, with AbiCheck's message
        // inside) instead of being called with the wrong signatures.
        static NativeMethods() => AbiCheck.Check(AbiCheck.Loaded());
    }

    /// <summary>The P/Invoke declarations name libkiln by the soname of the ABI
    /// they were generated for (NativeMethods.Lib, "libkiln.so.1"), never the
    /// unversioned libkiln.so, so the dynamic loader cannot hand them a library of
    /// another ABI by that name; and the library's own kiln_abi_version() must
    /// agree too.</summary>
    internal static class AbiCheck
    {
        // Its own method, so that NativeMethods' static constructor holds no
        // P/Invoke of its own.
        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static int Loaded() => NativeMethods.kiln_abi_version();

        /// <summary>Throws unless loaded, the loaded library's ABI version, is the one
        /// this assembly was generated for.</summary>
        internal static void Check(int loaded)
        {
            if (loaded != HeaderConstants.AbiVersion)
                throw new BadImageFormatException($"Kiln.dll {typeof(AbiCheck).Assembly.GetName().Version} was generated for " +
                                                  $"kiln ABI {HeaderConstants.AbiVersion}, but the {NativeMethods.Lib} loaded " +
                                                  $"has ABI {loaded}: install the libkiln this package was made with");
        }
    }
}
