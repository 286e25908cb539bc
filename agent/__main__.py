from gpuagent.cli import main

main()
