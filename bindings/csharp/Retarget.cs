// Makes an assembly that mcs compiled against Mono's class libraries into one
// that targets .NET Standard 2.1, as the dotnet SDK would have compiled it:
// its references to mscorlib and System.Core become one reference to
// netstandard 2.1.0.0. mcs cannot compile against netstandard.dll itself: Mono
// ships it as a facade of type forwarders only, and mcs needs the assembly
// that defines System.Object. build.py compiles this tool with mcs and Mono's
// own Mono.Cecil (a dependency of mono-devel) and runs it on Kiln.dll.
//
//   mono Retarget.exe IN.dll OUT.dll NETSTANDARD_FACADE.dll
//
// The facade's forwarders are the list of what .NET Standard 2.1 holds: a type
// that Kiln.dll uses and the facade does not forward is an error, as is a
// reference to any other assembly. Members are not checked (there is no
// reference assembly to check them against); the tests run against the output.
using System;
using System.Collections.Generic;
using System.Linq;
using Mono.Cecil;

static class Retarget
{
    static readonly string[] Retargeted = { "mscorlib", "System.Core" };

    static int Main(string[] args)
    {
        if (args.Length != 3)
        {
            Console.Error.WriteLine("usage: Retarget.exe IN.dll OUT.dll NETSTANDARD_FACADE.dll");
            return 2;
        }
        try
        {
            Run(args[0], args[1], args[2]);
            return 0;
        }
        catch (Exception e) when (e is InvalidOperationException || e is BadImageFormatException || e is System.IO.IOException)
        {
            Console.Error.WriteLine("Retarget: " + e.Message);
            return 1;
        }
    }

    static void Run(string input, string output, string facadePath)
    {
        var facade = ModuleDefinition.ReadModule(facadePath);
        var standard = facade.Assembly.Name;
        if (standard.Name != "netstandard" || standard.Version != new Version(2, 1, 0, 0))
            throw new InvalidOperationException(facadePath + " is " + standard.FullName + ", not netstandard 2.1.0.0");
        var forwarded = new HashSet<string>(facade.ExportedTypes.Where(t => t.IsForwarder).Select(t => t.FullName));

        var module = ModuleDefinition.ReadModule(input);
        var others = module.AssemblyReferences.Where(r => !Retargeted.Contains(r.Name)).Select(r => r.Name).ToList();
        if (others.Count > 0)
            throw new InvalidOperationException(input + " references " + string.Join(", ", others) + ", which netstandard does not hold");
        var netstandard = new AssemblyNameReference(standard.Name, standard.Version) { PublicKeyToken = standard.PublicKeyToken };

        var missing = new List<string>();
        foreach (var type in module.GetTypeReferences())
        {
            // A nested type's scope is its declaring type's.
            if (type.DeclaringType != null || !(type.Scope is AssemblyNameReference)) continue;
            if (!forwarded.Contains(type.FullName)) missing.Add(type.FullName);
            type.Scope = netstandard;
        }
        if (missing.Count > 0)
            throw new InvalidOperationException("not in .NET Standard 2.1: " + string.Join(", ", missing.OrderBy(n => n)));

        // Attribute arguments of type Type are stored as assembly-qualified names
        // (FixedBuffer's element type: "System.Byte, mscorlib, ..."): name them in
        // netstandard too. Only those attributes are decoded, the others are kept
        // as they are.
        foreach (var attribute in AllAttributes(module))
        {
            if (!attribute.Constructor.Parameters.Any(p => p.ParameterType.FullName == "System.Type")) continue;
            for (int i = 0; i < attribute.ConstructorArguments.Count; i++)
            {
                var argument = attribute.ConstructorArguments[i];
                if (argument.Value is TypeReference named && named.Scope is AssemblyNameReference)
                {
                    if (!forwarded.Contains(named.FullName))
                        throw new InvalidOperationException("not in .NET Standard 2.1: " + named.FullName);
                    named.Scope = netstandard;
                }
            }
        }
        // mcs marks assemblies with unsafe code with a SkipVerification request, a
        // code access security permission that .NET Standard does not have.
        module.Assembly.SecurityDeclarations.Clear();

        module.AssemblyReferences.Clear();
        module.AssemblyReferences.Add(netstandard);
        module.Write(output);

        var written = ModuleDefinition.ReadModule(output).AssemblyReferences.Select(r => r.FullName).ToList();
        if (written.Count != 1 || written[0] != netstandard.FullName)
            throw new InvalidOperationException(output + " references " + string.Join(", ", written));
        Console.WriteLine($"Retarget: {output} references {written[0]} alone ({forwarded.Count} types in the facade)");
    }

    static IEnumerable<CustomAttribute> AllAttributes(ModuleDefinition module)
    {
        foreach (var a in module.Assembly.CustomAttributes) yield return a;
        foreach (var a in module.CustomAttributes) yield return a;
        foreach (var type in module.GetTypes())
        {
            foreach (var a in type.CustomAttributes) yield return a;
            foreach (var member in type.Fields.Cast<ICustomAttributeProvider>().Concat(type.Methods).Concat(type.Properties)
                                              .Concat(type.Events).Concat(type.Methods.SelectMany(m => m.Parameters)))
                foreach (var a in member.CustomAttributes) yield return a;
        }
    }
}
